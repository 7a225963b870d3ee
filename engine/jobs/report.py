"""What the engine worker tells about itself, without prompt text: its stats (a file a browser test watches), a
waiting page's place in the fair order, the class view's snapshot of recent jobs and batch steps, and one line per
finished job in the server's log. A part of ``engine.jobs.worker.Worker`` (it reads the worker's queue under the
worker's lock), kept apart from the scheduling."""
from __future__ import annotations

import collections
import json
import logging
import os
import time

import engine.settings as settings
from engine.jobs.job import Job, batchable, seat, session_tag

logger = logging.getLogger(__name__)


class Reporting:
    """The worker's reports (mixed into ``Worker``)."""

    def remember(self, job: Job) -> None:
        self._history.append({
            "id": job.id, "session": session_tag(job.session), "kind": job.kind, "state": job.state.value,
            "warmup": job.warmup, "batchable": batchable(job),
            "batched": job.batch is not None and self.batching, "rows": job.rows, "tokens": job.tokens,
            "submitted": job.submitted_at, "started": job.started_at, "first_token": job.first_token_at,
            "finished": job.finished_at,
        })

    def log_end(self, job: Job) -> None:
        """One line per finished job in the server's log: when it was submitted and when it was ready (epoch
        seconds), and its client's tag (never an address), so a class's readiness and who waited can be read from
        the server itself (tests/browser/test_worker.py, test_class_trust.py)."""
        if not self._publish_to_file or not settings.WORKER_LOG.get():
            return
        off = self.wall_offset
        ran = (job.finished_at or 0) - (job.started_at or job.finished_at or 0)
        batch = f", up to {job.rows} requests per pass" if job.rows > 1 else ""
        kind = f"{job.kind} (warm-up)" if job.warmup else job.kind  # a class's log readers skip it
        logger.info(f"worker: {kind} {job.state} session={session_tag(job.session)} "
                    f"submitted_at={job.submitted_at + off:.3f} ready_at={(job.finished_at or 0) + off:.3f} "
                    f"(waited {job.waited_s:.2f} s, ran {ran:.2f} s{batch}) client={session_tag(job.client)}")

    def stats(self) -> dict:
        """What the worker is doing now (for tests and the health of a class session)."""
        with self._cv:
            run = self._running[0] if self._running else None
            return {
                "busy": run is not None,
                # by kind and a short tag only: the file is readable by whoever can read the server's files, and a
                # job's key holds its prompt
                "running": None if run is None else {"kind": run.kind, "session": session_tag(run.session),
                                                     "seconds": time.monotonic() - (run.started_at or 0)},
                "running_jobs": len(self._running),
                "queued": len(self._queue),
                "native_ids": list(self._native_ids),  # the worker threads' kernel ids (a test reads their CPU)
                "torch_threads": self._torch_threads,  # torch's intra-op count on the worker, after its last job
                **{k: int(v) for k, v in self._counts.items()},
            }

    def place(self, job: Job) -> dict:
        """For a waiting page: its place in the fair order (1 = next; 0 = running), how many wait, what runs now
        (kinds and a count: never anyone's prompt) and ``why`` it waits (a seats.refusal reason; None when it
        simply waits for its turn)."""
        with self._cv:
            order = self._ordered()
            running = list(self._running)
            place = 0 if job in running else (order.index(job) + 1 if job in order else 0)
            kinds = collections.Counter(j.kind for j in running)
            why = None
            if place and job.batch is not None and self.batching:
                held = [seat(j) for j in running if j.batch == job.batch]
                if held:
                    why = self._refusal(job, held)
            elif place and self._preemptible(job):
                why = self._alone_refusal(job)
            return {"place": place, "queued": len(order), "running": dict(kinds),
                    "batch": len(running) if any(j.batch is not None for j in running) else 0, "why": why}

    def snapshot(self, since_s: float = 300.0) -> dict:
        """The class view's data: running and queued jobs now, finished jobs and batch steps of the last
        ``since_s`` seconds (times in seconds before now, no prompt text)."""
        t = time.monotonic()
        with self._cv:
            def live(j: Job) -> dict:
                return {"session": session_tag(j.session), "kind": j.kind, "state": j.state.value, "tokens": j.tokens,
                        "warmup": j.warmup, "batchable": batchable(j),
                        "batched": j.batch is not None and self.batching, "waited_s": j.waited_s,
                        "running_s": t - j.started_at if j.started_at else 0.0}
            running = [live(j) for j in self._running]
            queued = [live(j) for j in self._ordered()]
            hist = [dict(h) for h in self._history if (h["finished"] or t) >= t - since_s]
            steps = [s for s in self._steps if s[1] >= t - since_s]
        for h in hist:
            for k in ("submitted", "started", "first_token", "finished"):
                h[k] = None if h[k] is None else h[k] - t
        return {"now": t, "running": running, "queued": queued, "finished": hist,
                "steps": [(a - t, b - t, r, p) for a, b, r, p in steps], "batching": self.batching,
                "max_batch": self.max_batch}

    def publish(self) -> None:
        """With ILE_WORKER_STATS=path, write ``stats()`` there (atomically) whenever a job starts or ends: how a
        browser test sees the server's worker go idle after a tab closes."""
        path = settings.WORKER_STATS.get()
        if not path or not self._publish_to_file:
            return
        try:
            tmp = f"{path}.{os.getpid()}.tmp"
            with open(tmp, "w") as f:
                json.dump(self.stats(), f)
            os.replace(tmp, path)
        except OSError:
            pass

    def idle(self) -> bool:
        with self._cv:
            return not self._running and not self._queue

    def note_step(self, phase: str, start: float, end: float, rows: int) -> None:
        """A batch's forward pass (monotonic times), for the class view's batch size over time."""
        self._steps.append((start, end, int(rows), phase))
