"""Two torchrun agents on this machine, joined the way two machines join: ``torchrun --nnodes 2
--nproc_per_node 1 --rdzv-backend c10d --rdzv-endpoint 127.0.0.1:PORT`` started twice, each agent one node
and its worker one rank (both workers have LOCAL_RANK 0, as on two machines).

The first agent hosts the rendezvous store (``--rdzv-conf is_host=1``), the second connects to it
(``is_host=0``). The port is one the system handed out a moment before; should another program take it in
between, the first agent cannot host the store, and the pair is started again on a fresh port and id.
"""
from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import uuid
from dataclasses import dataclass
from pathlib import Path

BIND_FAILED = "RendezvousConnectionError"
"""What an agent prints when it cannot host (or reach) the rendezvous store."""


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listened on a moment ago."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def torchrun_two_nodes(port: int, run_id: str, hosts_store: bool) -> list[str]:
    """One agent's torchrun command line, up to the program it runs."""
    return [sys.executable, "-m", "torch.distributed.run", "--nnodes", "2", "--nproc_per_node", "1",
            "--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{port}", "--rdzv-id", run_id,
            "--rdzv-conf", f"is_host={int(hosts_store)}", "--local-addr", "127.0.0.1"]


@dataclass(frozen=True)
class Agents:
    """What the two agents printed (stdout and stderr together), the store's host first."""

    outputs: tuple[str, str]

    def group_ranks(self) -> set[int]:
        """The node ranks the rendezvous gave the agents (torchrun logs them at LOGLEVEL=INFO)."""
        return {int(rank) for output in self.outputs for rank in re.findall(r"group_rank=(\d+)", output)}


def run_two_agents(program: list[str], cwd: Path, logs: Path, timeout: float = 300, attempts: int = 3) -> Agents:
    """Run ``program`` (``-m module args...``) under two torchrun agents of one job, their output written to
    ``logs/agent-{0,1}.log``; raise with both agents' output when either fails."""
    environment = {**os.environ, "OMP_NUM_THREADS": "1", "LOGLEVEL": "INFO"}
    logs.mkdir(parents=True, exist_ok=True)
    paths = (logs / "agent-0.log", logs / "agent-1.log")
    for _ in range(attempts):
        port, run_id = free_port(), f"vtrepro-{uuid.uuid4().hex[:8]}"
        agents = []
        for hosts, path in zip((True, False), paths):
            with path.open("w") as log:
                agents.append(subprocess.Popen([*torchrun_two_nodes(port, run_id, hosts), *program], cwd=cwd,
                                               env=environment, stdout=log, stderr=subprocess.STDOUT,
                                               start_new_session=True))
        try:
            if agents[0].wait(timeout=timeout) == 0:
                agents[1].wait(timeout=timeout)
        finally:
            for agent in agents:  # the other agent of a failed pair waits for its partner: end it
                if agent.poll() is None:
                    os.killpg(agent.pid, signal.SIGKILL)
                    agent.wait()
        outputs = (paths[0].read_text(), paths[1].read_text())
        if all(agent.returncode == 0 for agent in agents):
            return Agents(outputs)
        if BIND_FAILED not in outputs[0]:
            break
    raise AssertionError("two-agent torchrun failed:\n" + "\n---\n".join(output[-4000:] for output in outputs))
