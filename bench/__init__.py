"""The course's measurements on a GPU: ``python -m bench --list`` names them, ``python -m bench NAME`` runs one.

Code lives here, results under ``bench/results/<gpu>/<date>-<what>.json``, and ``bench/RESULTS.md`` says what each
measured. ``bench.harness`` is what every measurement shares; ``bench.registry`` lists them.
"""
