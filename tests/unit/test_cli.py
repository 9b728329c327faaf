"""``python -m distbridge info`` and the argument handling of ``check``: the real commands in
subprocesses, the report builders in-process with environment dicts."""

from __future__ import annotations

import importlib.util
import json
import os
import platform
import subprocess
import sys

import pytest
import torch

import distbridge as idist
from distbridge.__main__ import main
from distbridge.cli import check, info
from distbridge.cli.check import format_bytes, parse_size, parse_sizes
from distbridge.cli.info import format_info
from distbridge.models.horovod import runtime as _horovod_runtime
from distbridge.models.native import NativeModel
from distbridge.models.native.init import DEFAULT_MASTER

# Variables of any launcher: removed so that the commands see no launcher unless a test sets one.
_LAUNCHER_PREFIXES = (
    "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "GROUP_WORLD_SIZE",
    "MASTER_", "TORCHELASTIC_", "SLURM_", "OMPI_", "PMI_", "PMIX_", "HOROVOD_", "LSB_", "JSM_",
    "MV2_", "MPI_LOCALRANKID",
)  # fmt: skip
_TORCHRUN_ENV = {
    "RANK": "1",
    "WORLD_SIZE": "4",
    "LOCAL_RANK": "1",
    "LOCAL_WORLD_SIZE": "2",
    "MASTER_ADDR": "10.1.2.3",
    "MASTER_PORT": "29512",
}


def _run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(_LAUNCHER_PREFIXES)}
    return subprocess.run(
        [sys.executable, "-m", "distbridge", *args],
        env={**clean, **(env or {})},
        capture_output=True,
        text=True,
        timeout=90,
    )


def test_info_prints_every_section_with_this_machines_versions() -> None:
    proc = _run("info")
    assert proc.returncode == 0, proc.stderr
    for heading in ("Launcher", "initialize() would", "Backends", "Versions", "Devices"):
        assert f"\n{heading}\n" in proc.stdout
    assert "none detected" in proc.stdout
    assert torch.__version__ in proc.stdout
    assert idist.__version__ in proc.stdout


def test_info_json_matches_this_process() -> None:
    proc = _run("info", "--json")
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert set(report) == {
        "schema", "hostname", "launcher", "launcher_warnings", "launcher_error", "initialize",
        "backends", "versions", "devices", "system", "environment",
    }  # fmt: skip
    assert report["schema"] == info.SCHEMA_VERSION
    versions = report["versions"]
    assert versions["torch"] == torch.__version__
    assert versions["python"] == platform.python_version()
    assert versions["cuda"] == torch.version.cuda
    assert versions["gloo"] == torch.distributed.is_gloo_available()
    assert (versions["horovod"] is not None) is idist.has_hvd_support
    assert (versions["torch_xla"] is not None) is idist.has_xla_support
    assert report["launcher"] is None
    assert report["initialize"]["world_size"] == 1
    assert report["initialize"]["backend"] == ("nccl" if torch.cuda.is_available() else "gloo")
    assert report["backends"]["available"] == list(idist.available_backends())
    rows = {row["name"]: row for row in report["backends"]["all"]}
    assert set(rows) == {b for m in idist.registered_computation_models for b in m.backends}
    for model in idist.registered_computation_models:
        for name in model.backends:
            assert rows[name]["reason"] == model.unavailable_reason(name)
            assert rows[name]["available"] is (name in idist.available_backends())
    assert len(report["devices"]["cuda"]) == (
        torch.cuda.device_count() if torch.cuda.is_available() else 0
    )


def test_info_json_shows_a_torchrun_environment() -> None:
    proc = _run("info", "--json", env=_TORCHRUN_ENV)
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert report["launcher"] == {
        "name": "torchelastic", "rank": 1, "world_size": 4, "local_rank": 1,
        "local_world_size": 2, "node_rank": 0, "nnodes": 2, "master_addr": "10.1.2.3",
        "master_port": 29512,
    }  # fmt: skip
    plan = report["initialize"]
    assert (plan["rank"], plan["world_size"], plan["local_rank"]) == (1, 4, 1)
    assert plan["rendezvous"] == "env"
    assert plan["rank0_hosts_store"] is True
    assert (plan["master_addr"], plan["master_port"]) == ("10.1.2.3", 29512)


def test_info_reports_what_a_bug_report_needs() -> None:
    env = {**_TORCHRUN_ENV, "SLURM_JOB_ID": "7", "OMPI_COMM_WORLD_RANK": "1",
           "HOROVOD_RANK": "1", "NCCL_SOCKET_IFNAME": "eth0", "NCCL_ALGO": "Ring",
           "HOME": "/home/me", "API_TOKEN": "secret"}  # fmt: skip
    report = info.collect(env)
    system = report["system"]
    assert system["os"] == platform.platform()
    assert system["cpu_count"] == os.cpu_count()
    assert system["usable_cpus"] == len(os.sched_getaffinity(0))
    assert system["memory_bytes"] > system["memory_available_bytes"] > 0
    tuning = report["environment"]["tuning"]
    assert list(tuning)[:4] == [
        "DISTBRIDGE_DEBUG", "NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME", "OMP_NUM_THREADS",
    ]  # fmt: skip
    assert tuning["NCCL_SOCKET_IFNAME"] == "eth0" and tuning["NCCL_ALGO"] == "Ring"
    assert tuning["OMP_NUM_THREADS"] is None and tuning["DISTBRIDGE_DEBUG"] is None
    assert report["environment"]["launcher"] == {
        "HOROVOD_RANK": "1", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2",
        "MASTER_ADDR": "10.1.2.3", "MASTER_PORT": "29512", "OMPI_COMM_WORLD_RANK": "1",
        "RANK": "1", "SLURM_JOB_ID": "7", "WORLD_SIZE": "4",
    }  # fmt: skip
    text = format_info(report)
    for heading in ("System", "Tuning variables (-: not set)", "Launcher variables"):
        assert f"\n{heading}\n" in text
    assert f"  cpus           {os.cpu_count()} (" in text
    assert " GiB available)" in text
    assert "  NCCL_SOCKET_IFNAME       eth0\n" in text
    assert "  GLOO_SOCKET_IFNAME       -\n" in text
    assert "\n  SLURM_JOB_ID=7\n" in text and "\n  MASTER_ADDR=10.1.2.3\n" in text
    assert "secret" not in text and "/home/me" not in text
    assert "none set (RANK, WORLD_SIZE" in format_info(info.collect({}))


def test_the_horovod_hint_says_how_to_build_it(monkeypatch: pytest.MonkeyPatch) -> None:
    find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *a: None if name == "horovod" else find_spec(name, *a),
    )
    reason = _horovod_runtime.unavailable.__wrapped__()
    assert reason.startswith("horovod is not installed: build Horovod 0.28.1 from source")
    assert "`bash ci/build_horovod.sh`" in reason and "nox -s horovod" in reason
    assert "distbridge[" not in reason  # distbridge is not on a package index


def test_info_text_shows_the_launcher_values() -> None:
    text = format_info(info.collect(_TORCHRUN_ENV))
    assert "detected       torchelastic" in text
    assert "rank           1 of 4" in text
    assert "node rank      0 of 2" in text
    assert "rank 0 hosts a TCPStore at 10.1.2.3:29512" in text


def test_info_under_a_launcher_that_hosts_the_store() -> None:
    plan = info.collect({**_TORCHRUN_ENV, "TORCHELASTIC_USE_AGENT_STORE": "True"})["initialize"]
    assert plan["rendezvous"] == "launcher-store"
    assert plan["rank0_hosts_store"] is False
    assert "10.1.2.3:29512" in plan["summary"]


def test_info_without_master_port_names_ignites_default() -> None:
    """RANK / WORLD_SIZE without MASTER_PORT: initialize meets at ignite's default port, as
    models/native/init.py does (info asks it)."""
    env = {k: v for k, v in _TORCHRUN_ENV.items() if k != "MASTER_PORT"}
    plan = info.collect(env)["initialize"]
    assert (plan["rendezvous"], plan["master_port"]) == ("env", int(DEFAULT_MASTER["MASTER_PORT"]))
    assert "10.1.2.3:15000" in plan["summary"] and "ignite's default" in plan["summary"]
    alone = info.collect({"RANK": "0", "WORLD_SIZE": "1"})["initialize"]
    assert (alone["rendezvous"], alone["rank0_hosts_store"]) == ("in-memory", False)


def test_info_under_mpirun_without_an_address_says_initialize_will_fail() -> None:
    env = {"OMPI_COMM_WORLD_RANK": "1", "OMPI_COMM_WORLD_SIZE": "2"}
    plan = info.collect(env)["initialize"]
    assert (plan["rendezvous"], plan["rank0_hosts_store"]) == ("rank0-store", True)
    assert plan["summary"].endswith(
        "; initialize() will fail until MASTER_ADDR and MASTER_PORT are set"
    )


def test_info_reports_malformed_launcher_variables_instead_of_crashing() -> None:
    report = info.collect({"RANK": "one", "WORLD_SIZE": "2"})
    assert report["launcher"] is None
    assert "RANK='one'" in report["launcher_error"]
    assert report["initialize"]["rendezvous"] == "invalid"
    assert "unreadable: " in format_info(report)


def test_info_without_a_launcher_is_a_world_of_one() -> None:
    report = info.collect({})
    assert report["launcher"] is None
    plan = report["initialize"]
    assert (plan["rank"], plan["world_size"], plan["rendezvous"]) == (0, 1, "in-memory")
    assert plan["rank0_hosts_store"] is False


def test_check_with_a_misspelt_backend_suggests_the_right_one() -> None:
    proc = _run("check", "--backend", "ncl")
    assert proc.returncode == 2
    assert "'ncl'" in proc.stderr
    assert "Did you mean 'nccl'?" in proc.stderr
    assert proc.stdout == ""


@pytest.mark.skipif(
    NativeModel.unavailable_reason("nccl") is None, reason="nccl can run on this machine"
)
def test_check_nccl_on_a_machine_without_it_says_why() -> None:
    proc = _run("check", "--backend", "nccl", "--json")
    assert proc.returncode == 2
    report = json.loads(proc.stdout)
    assert report["ok"] is False
    reason = NativeModel.unavailable_reason("nccl")
    assert reason is not None
    assert reason in report["error"]["message"]
    assert "'nccl' is not available" in report["error"]["message"]


def test_check_refuses_nproc_under_a_launcher(monkeypatch: pytest.MonkeyPatch) -> None:
    for key, value in _TORCHRUN_ENV.items():
        monkeypatch.setenv(key, value)
    report, code = check.run(check.CheckOptions("gloo", (4,), nproc=2))
    assert code == check.USAGE_ERROR
    assert "--nproc 2" in report["error"]["message"]
    assert "rank 1 of 4" in report["error"]["message"]


def test_check_alone_is_a_world_of_one(capsys: pytest.CaptureFixture[str]) -> None:
    assert check.main(check.CheckOptions("gloo", (4, 1024), iters=2), as_json=False) == 0
    out = capsys.readouterr().out
    assert "world of 1, this process alone" in out
    assert "     1 KiB" in out
    assert out.rstrip().endswith("OK")
    assert idist.backend() is None  # finalized


@pytest.mark.parametrize(
    ("text", "sizes"),
    [("4", (4,)), ("4,1K,64MiB", (4, 1024, 64 << 20)), (" 8 , 2m ,1G", (8, 2 << 20, 1 << 30))],
)
def test_parse_sizes(text: str, sizes: tuple[int, ...]) -> None:
    assert parse_sizes(text) == sizes


@pytest.mark.parametrize(("text", "named"), [("3", "[3]"), ("4,6", "[6]"), ("", "none")])
def test_parse_sizes_rejects_what_is_not_whole_float32s(text: str, named: str) -> None:
    with pytest.raises(ValueError, match="multiples of 4") as caught:
        parse_sizes(text)
    assert named in str(caught.value)


def test_parse_size_names_the_bad_text() -> None:
    with pytest.raises(ValueError, match="'1X'"):
        parse_size("1X")


def test_format_bytes() -> None:
    assert [format_bytes(n) for n in (4, 1024, 1536, 64 << 20)] == [
        "4 B", "1 KiB", "1536 B", "64 MiB",
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["check", "--iters", "0"], "--iters must be at least 1, got 0"),
        (["check", "--nproc", "0"], "--nproc must be at least 1, got 0"),
        (["check", "--timeout", "-1"], "--timeout must be a positive number"),
        (["check", "--timeout", "nan"], "--timeout must be a positive number of seconds, got nan"),
        (["why", "dumps", "--wait", "nan"], "--wait must be a finite number of seconds >= 0"),
        (["why", "dumps", "--wait", "-1"], "seconds >= 0, got -1.0"),
        (["check", "--sizes", "5"], "--sizes '5'"),
        ([], "COMMAND"),
    ],
)
def test_bad_arguments_exit_2_naming_the_value(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(argv)
    assert exited.value.code == 2
    assert message in capsys.readouterr().err
