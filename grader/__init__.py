"""The TA-side harness: release, sanitize, execute, schedule, score, export, feedback.

Data flows one way: solutions/ -> release -> student notebooks; a submission -> sanitize ->
execute (papermill) -> score (nbgrader gradebook) -> export (CSV) and feedback (HTML).
"""

# Part of every result's identity: a notebook graded by another version is graded again.
GRADER_VERSION = "0.2.0"  # 0.2: vetted builds, bans on the compiled kernel, CPU replay, watchdog
