"""CPU of a long-lived test cluster's own daemons (fspo_testing/shared_ray.py), after many short jobs.

The suite's two shared clusters live through the whole session (~30 min) and host ~10 trainer runs each, every run
a job whose ~10 workers leave their .out/.err files in the cluster's logs folder. Their daemons then cost ~180
CPU-s in a CI run (process accounting), the log monitor and dashboard agent most. This starts a shared cluster,
runs JOBS jobs of WORKERS actors each (actors forked from the warm server, as in the suite), and reads each daemon's
CPU time over IDLE_S seconds with no job running and over one more job.

    python benchmarks/ray_daemons.py [--jobs 12] [--workers 10] [--idle 60] [--retire] [--ray-env NAME=VALUE ...]

--ray-env overrides the suite's settings (fspo_testing.shared_ray.QUIET_DAEMONS) to compare with Ray's defaults, e.g.
``--ray-env RAY_LOG_MONITOR_MAX_OPEN_FILES=200 REPORTER_UPDATE_INTERVAL_MS=5000 RAY_enable_metrics_collection=1``.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DAEMONS = {
    "log monitor": "log_monitor.py",
    "dashboard agent": "dashboard/agent.py",  # found as the raylet's child (its process renames itself)
    "raylet": "raylet/raylet",
    "gcs": "gcs/gcs_server",
    "autoscaler monitor": "autoscaler/_private/monitor.py",
    "runtime env agent": "runtime_env/agent/main.py",  # likewise
}
JOB = textwrap.dedent(
    """
    import ray, sys
    ray.init(address=sys.argv[1], logging_level="ERROR")

    @ray.remote(num_cpus=1)
    class Talker:
        def talk(self):
            print("a line for the driver")
            return 1

    actors = [Talker.remote() for _ in range(int(sys.argv[2]))]
    assert sum(ray.get([a.talk.remote() for a in actors])) == len(actors)
    """
)


def daemon_cpu(pids: dict[str, list[int]]) -> dict[str, float]:
    ticks = os.sysconf("SC_CLK_TCK")
    out = {}
    for name, found in pids.items():
        total = 0.0
        for pid in found:
            try:
                fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            total += (int(fields[11]) + int(fields[12])) / ticks
        out[name] = total
    return out


def find_daemons(folder: str) -> dict[str, list[int]]:
    """The cluster's daemons by command line; the agents (renamed ``ray::...``) as the raylet's children."""
    found = {name: [] for name in DAEMONS}
    parents = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            parents[int(entry)] = (int(Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[1]), cmdline)
        except OSError:
            continue
        if folder not in cmdline:
            continue
        program = " ".join(cmdline.split()[:3])  # the raylet's arguments name the agents' commands too
        for name, marker in DAEMONS.items():
            if marker in program:
                found[name].append(int(entry))
    for pid, (parent, cmdline) in parents.items():
        if parent in found["raylet"]:
            if cmdline.startswith("ray::DashboardAgent"):
                found["dashboard agent"].append(pid)
            elif cmdline.startswith("ray::RuntimeEnvAgent"):
                found["runtime env agent"].append(pid)
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=12)
    parser.add_argument("--workers", type=int, default=10)
    parser.add_argument("--idle", type=float, default=60.0)
    parser.add_argument("--retire", action="store_true", help="retire dead workers' logs before measuring")
    parser.add_argument("--ray-env", nargs="*", default=[], help="NAME=VALUE for the cluster, over the suite's own")
    args = parser.parse_args()
    sys.path.insert(0, str(REPO))
    from fspo_testing import shared_ray
    from fspo_testing.warm_python import warm_ray_workers

    shared_ray.QUIET_DAEMONS.update(item.split("=", 1) for item in args.ray_env)
    print(f"cluster settings: {shared_ray.QUIET_DAEMONS}; retire dead workers' logs: {args.retire}")
    warm_ray_workers()
    address = shared_ray.shared_cluster()
    logs = shared_ray.logs_folder()
    folder = str(logs.parents[2])
    pids = find_daemons(folder)

    def job() -> None:
        subprocess.run([sys.executable, "-c", JOB, address, str(args.workers)], check=True, capture_output=True)

    started = time.monotonic()
    for _ in range(args.jobs):
        job()
    if args.retire:
        shared_ray.retire_dead_workers_logs()
    files = len(list(logs.glob("worker*")))
    print(f"{args.jobs} jobs of {args.workers} actors in {time.monotonic() - started:.0f} s; {files} worker log files")
    before = daemon_cpu(pids)
    time.sleep(args.idle)
    idle = daemon_cpu(pids)
    started = time.monotonic()
    job()
    one_job_s = time.monotonic() - started
    after = daemon_cpu(pids)
    print(f"{'daemon':<20} {'idle CPU-s/min':>15} {'one job CPU-s':>14}   (job {one_job_s:.1f} s)")
    for name in DAEMONS:
        print(f"{name:<20} {60 * (idle[name] - before[name]) / args.idle:15.2f} {after[name] - idle[name]:14.2f}")
    print(
        f"{'all':<20} {60 * sum(idle[n] - before[n] for n in DAEMONS) / args.idle:15.2f} "
        f"{sum(after[n] - idle[n] for n in DAEMONS):14.2f}"
    )


if __name__ == "__main__":
    main()
