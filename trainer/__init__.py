"""PySpark jobs over event files or the collector's archive (docs/TRAINING.md, DESIGN.md).

- ``acep train`` (:mod:`trainer.cli`, :func:`trainer.train.train`): a history graph and its
  signed sketch, fitted to budgets and published to the collector if asked.
- ``acep exact-batch`` (:mod:`trainer.exact`, :func:`trainer.exact.exact_batch`): exact
  NFA^b matching of every event.
- ``acep demo`` (:mod:`trainer.demo`): collector, trainer and agent on one machine.

They need ``pip install "acep[spark]"`` and Java 17.
"""
