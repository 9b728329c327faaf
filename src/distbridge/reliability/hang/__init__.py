"""Hang diagnosis: who is stuck, where, and why, without a debugger.

The pieces, in the order a hang goes through them:

- ``ledger``: each rank's recent public collectives (sequence number per group, op, payload
  dtype and shape, the caller's line, passed or raised), written by the models' wrapper
  (``models/base.py``'s ``collective``) in plain Python, and read back as ``Record`` rows.
- ``report``: a rank's report (its ledger, where its main thread is, the engine's record),
  the ``Reporter`` thread that publishes it through the job's store, and asking every rank
  for its report (``collect``), or reading the reports the ranks left in a folder
  (``SIGUSR2``, ``DISTBRIDGE_HANG_DIR``); ``job_cards``: a card per live job so that ``why
  --pid`` finds the store (and the JSON file helpers the reports use too); ``stacks``: stack
  dumps, the fault file of a rank killed by a signal, and the watcher that dumps on a
  peer's request.
- ``verdict``: from the reports alone (pure), who is at fault: a rank stuck outside the
  collective, diverged calls, the same collective with another shape or dtype, a dead
  rank; its first line names the culprit. It holds ``RankReport``, a rank's parsed report.
- ``engine_trace``: the engine's own record (torch's flight recorder, read by
  ``models/native/flight_recorder.py``) beside the ledger, in ``Record`` rows too.
- ``signals``: SIGTERM and SIGUSR2 answered in every process distbridge starts or joins: the
  verdict on SIGTERM while in a collective, this rank's report on SIGUSR2.

Who asks: a collective that times out (``fail_together``), a timed barrier, ``python -m
distbridge why``, and the spawn parent for a failed job.
"""
