"""The driver's view of the cluster: where servers and episode workers were placed, and
what happens to the servers while a run goes on.

On a cluster of several nodes (or with GPU servers) the run prints one line per node —
its servers and their GPUs — and where the episode workers went, and writes
``workers.json`` beside ``servers.json``; a one-node CPU run prints nothing of this.

Every few seconds each supervised server actor is asked where it serves. One that does not
answer (its node left the cluster, its engine died and Ray is restarting it, or its
placement group waits for room) is announced once — with how many replicas of its model
still serve, because calls fail over to them (see ``runtime.actors.RunState``) — and again
when it is back, with its new node. ``servers.json`` follows every move.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Callable

from rich.markup import escape

from edv_ray.runtime.servers import ServedPool

CHECK_EVERY_S = 5.0
ANSWER_WITHIN_S = 5.0


class ServerWatch:
    def __init__(self, pool: ServedPool, run_dir: Path, echo: Callable[[str], None],
                 interval_s: float = CHECK_EVERY_S) -> None:
        self.pool = pool
        self.run_dir = run_dir
        self.echo = echo
        self.interval_s = interval_s
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> "ServerWatch":
        if self.pool.actor_by_url:
            self._thread = threading.Thread(target=self._loop, name="edv-server-watch",
                                            daemon=True)
            self._thread.start()
        return self

    def stop(self) -> None:
        """Stop watching, after a last check: a server lost near the end is still told."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=ANSWER_WITHIN_S + 5)
            try:
                self.check()
            except Exception:  # noqa: BLE001 - best effort at the end of a run
                pass

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                self.check()
            except Exception as err:  # noqa: BLE001 - a watch must not end the run
                self.echo(f"[yellow]server watch: {type(err).__name__}: {escape(str(err))}[/]")

    def check(self) -> None:
        import ray

        pool = self.pool
        urls = list(pool.actor_by_url)
        refs = {pool.actor_by_url[u].info.remote(): u for u in urls}
        ready, _ = ray.wait(list(refs), num_returns=len(refs), timeout=ANSWER_WITHIN_S)
        answers = {}
        for ref in ready:
            try:
                answers[refs[ref]] = ray.get(ref)
            except Exception:  # noqa: BLE001 - dead or restarting: unreachable
                pass
        moved = False
        for n, url in enumerate(urls):  # pool.infos[n] is the server first at urls[n]
            info, was = answers.get(url), pool.infos[n]
            if info is None and url not in pool.down:
                pool.down.add(url)
                same = [u for u, i in zip(urls, pool.infos) if i.model_name == was.model_name]
                left = sum(u not in pool.down for u in same)
                self.echo(f"[yellow]server {escape(was.server_id)} is unreachable (its node left, "
                          f"or it restarts): {escape(was.model_name)} goes on with {left} of {len(same)} "
                          "replica(s)[/]")
            elif info is not None and url in pool.down:
                pool.down.discard(url)
                self.echo(escape(f"server {was.server_id} is back on node {(info.node_id or '?')[:8]} "
                                 f"({info.base_url})"))
            if info is not None and info != was:
                pool.infos[n] = info
                moved = True
        if moved:
            pool.write(self.run_dir)


def show_placement(pool: ServedPool, runner, run_dir: Path, echo: Callable[[str], None]) -> None:
    """Print the layout (servers per node, the workers' nodes) on a multi-node or GPU
    cluster; ``workers.json`` records the workers' nodes either way."""
    import ray

    from edv_ray.results.parquet_io import write_text_atomic

    write_text_atomic(run_dir / "workers.json", json.dumps(runner.placement(), indent=1))
    nodes = sum(1 for n in ray.nodes() if n.get("Alive"))
    if nodes > 1 or any(i.gpu_ids for i in pool.infos):
        echo(f"cluster: {nodes} node(s), {ray.cluster_resources().get('GPU', 0):g} GPU(s)")
        for line in pool.layout_lines():
            echo(f"  {line}")
        echo(f"  {runner.placement_line()}")
