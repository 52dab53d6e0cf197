"""``mediajobs simulate``: a storm of uploads, duplicates, redeliveries and crashes
against the embedded AWS, and the numbers that show whether exactly-once held.

The parent process starts the moto server with the stack of ``template.yaml``, uploads
the originals (small real JPEGs, a share of them byte-identical copies under other keys),
sends a share of their events twice, and runs ``workers`` worker processes. Each worker
runs the real handler behind an emulated event source mapping, with short leases, built
from the settings and the stack it is given as arguments (nothing goes through the
environment). A worker dies (``os._exit``) with probability ``crash_rate`` per job it
claims, at one step boundary chosen at random: after the claim, after an output, after the manifest,
after done, or after the handler returned but before the acknowledgement. A dead worker
is replaced, as Lambda starts a new execution environment. A share of successful
records is not acknowledged in time and comes back (a redelivery after the visibility
timeout). Nothing in the pipeline is replaced: crashes come from the observer, byte
counts from a wrapped store (:class:`~.worker.CountingStore`), per-record figures from the
handler's ``on_record``; the renders are real, of small images. One ``--seed`` fixes
every random choice, crash points included (:func:`~.worker.crash_point`).

Every worker writes what happened to a JSON-lines log of its own (flushed per line, so
a crash loses nothing written before it); the parent reads them at the end and checks
the bucket, the ledger and the queues.

Its parts, one module each:

* :mod:`.config`: the storm's shape, :class:`~.config.StormConfig` (the flags of
  ``mediajobs simulate`` are its fields);
* :mod:`.plan`: every write of the storm, in order, from the seed;
* :mod:`.worker`: a worker process (crash points, counts, lost acknowledgements);
* :mod:`.pool`: the worker processes, a dead one replaced;
* :mod:`.feeder`: the planned writes sent while the workers run, events sent again;
* :mod:`.collection`: the collection runs while the storm goes on;
* :mod:`.accounting`: duplicates, duplicate renders and their cost, from the events;
* :mod:`.checks` and :mod:`.notification_checks`: what must hold at the end;
* :mod:`.summary`: the one JSON object;
* :mod:`.run`: :func:`~.run.run_storm`, the storm start to end.

This package imports nothing here: a worker process imports only what it runs
(:mod:`.worker`).
"""
