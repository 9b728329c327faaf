"""Imported by the warm starter's server only (the last of `warm_start.PRELOAD`): the report
signal leaves the server running, as a ``pkill -USR2 -f`` that matches its command line
(which lists the script's folder, in ``sys_path``) would otherwise end it, and every worker
(a fork of it) with it. Its workers set their own handler first thing
(`reliability.hang.signals.answer_report_signal`)."""

from __future__ import annotations

import signal

if signal.getsignal(signal.SIGUSR2) is signal.SIG_DFL:  # the server writes no report of its own
    signal.signal(signal.SIGUSR2, lambda signum, frame: None)
