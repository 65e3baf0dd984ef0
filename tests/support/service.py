"""Running the real service for tests: `arenaplan serve` in a subprocess on a free loopback port.

Each `ServiceProcess` is a real uvicorn server with its own SQLite file under the test's tmp
directory; helpers upload models, poll plans and read metrics over HTTP (httpx). No test here.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

from schemas.plan import PlanRequest

REPO = Path(__file__).resolve().parents[2]
GENEROUS = 2**40
START_TIMEOUT_S = 90


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def cli(*args: str, env: dict | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    """Run the `arenaplan` command line in a subprocess."""
    return subprocess.run(
        [sys.executable, "-m", "arenaplan", *args], cwd=REPO, capture_output=True, text=True,
        timeout=timeout, env={**os.environ, **(env or {})},
    )


class ServiceProcess:
    """`arenaplan serve` on 127.0.0.1 with a SQLite file in `directory`."""

    def __init__(self, directory: Path, *, workers: int = 1, env: dict | None = None,
                 args: tuple[str, ...] = ()):
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.db = self.directory / "arenaplan.db"
        self.workers, self.extra_env, self.extra_args = workers, env or {}, args
        self.process: subprocess.Popen | None = None
        self.port = 0
        self.log_path = self.directory / "server.log"
        self.starts = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, env: dict | None = None) -> ServiceProcess:
        self.port = free_port()
        self.starts += 1
        log = open(self.log_path, "a")  # noqa: SIM115 - kept open by the child
        log.write(f"\n--- start {self.starts} on port {self.port}\n")
        log.flush()
        self.process = subprocess.Popen(
            [sys.executable, "-m", "arenaplan", "serve", "--host", "127.0.0.1", "--port",
             str(self.port), "--db", str(self.db), "--workers", str(self.workers),
             "--log-level", "info", *self.extra_args],
            cwd=REPO, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
            env={**os.environ, "XDG_DATA_HOME": str(self.directory / "xdg"),
                 **self.extra_env, **(env or {})},
        )
        log.close()
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"server exited {self.process.returncode}:\n{self.log()}")
            try:
                if httpx.get(self.url + "/readyz", timeout=2).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        self.stop()
        raise RuntimeError(f"server not ready in {START_TIMEOUT_S} s:\n{self.log()}")

    def log(self) -> str:
        return self.log_path.read_text() if self.log_path.exists() else ""

    def worker_pids(self) -> list[int]:
        """Solver processes of this server (children running multiprocessing's spawn_main)."""
        assert self.process is not None
        pids = []
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                stat = (entry / "stat").read_text()
                cmdline = (entry / "cmdline").read_bytes()
            except OSError:
                continue
            ppid = int(stat.rsplit(")", 1)[1].split()[1])
            if ppid == self.process.pid and b"spawn_main" in cmdline:
                pids.append(int(entry.name))
        return pids

    def kill_hard(self) -> None:
        """SIGKILL the server process alone, as a crash would (its solvers notice and exit)."""
        assert self.process is not None
        self.process.kill()
        self.process.wait(timeout=10)

    def stop(self) -> None:
        """Graceful stop (SIGINT), then SIGKILL to the whole process group if needed."""
        if self.process is None:
            return
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                pass
        try:
            os.killpg(self.process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.process.wait(timeout=10)


def request_json(budget: int = GENEROUS, **fields) -> str:
    return PlanRequest(budgets={"cpu": budget}, **fields).model_dump_json()


def submit(url: str, model: bytes | Path, request: str, *, wait: float | None = None,
           key: str | None = None, timeout: float = 120) -> httpx.Response:
    data = model.read_bytes() if isinstance(model, Path) else model
    params = {} if wait is None else {"wait": wait}
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    return httpx.post(url + "/plan", params=params, headers=headers, timeout=timeout,
                      files={"model": ("model.onnx", data, "application/octet-stream"),
                             "request": (None, request, "application/json")})


def get(url: str, path: str, key: str | None = None, headers: dict | None = None,
        **kwargs) -> httpx.Response:
    headers = {**({"Authorization": f"Bearer {key}"} if key else {}), **(headers or {})}
    return httpx.get(url + path, headers=headers, timeout=30, **kwargs)


def wait_for(url: str, plan_id: str, *, until: tuple[int, ...] = (200, 409, 422),
             timeout: float = 60, key: str | None = None, predicate=None) -> httpx.Response:
    """Poll GET /plans/{id} until its status code is in `until` (and `predicate` holds)."""
    deadline = time.monotonic() + timeout
    while True:
        response = get(url, f"/plans/{plan_id}", key)
        if response.status_code in until and (predicate is None or predicate(response)):
            return response
        if time.monotonic() > deadline:
            raise AssertionError(f"plan {plan_id}: still {response.status_code} "
                                 f"{response.text[:300]} after {timeout} s")
        time.sleep(0.2)


def metric(url: str, name: str, key: str | None = None, **labels: str) -> float:
    """One sample of /metrics (0 when absent)."""
    text = get(url, "/metrics", key).text
    wanted = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    series = f"{name}{{{wanted}}}" if labels else name
    for line in text.splitlines():
        if line.startswith(series + " "):
            return float(line.split()[-1])
    return 0.0


def body(response: httpx.Response) -> dict:
    return json.loads(response.text)
