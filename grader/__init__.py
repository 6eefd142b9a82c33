"""The TA-side harness: a submitted notebook through every stage to its grade, in rooms named for the stages.

A class's submissions (``intake``: found, each rebuilt from the master copy with the student's answer cells only)
-> ``run``: the notebook executed inside the sandbox (``wall``), a recording cell exporting its launch plans and
answers as data -> ``build``: its kernels built from their source text in a fresh sandbox (vetted, no GPU), the
TTGIR then compiled for the GPU outside it; on a CPU the plans replayed through Triton's interpreter (``replay``)
-> ``judge``: the master test cells on the exported answers, each plan replayed on the judge's own secret inputs,
checked against the reference and timed beside the reference solution and the library on a GPU held alone
(``gpu``) -> ``score``: one item per graded cell, stored as results JSON and in nbgrader's gradebook ->
``report``: CSV tables, feedback pages, the class overview (and ``lms``: the term's lateness, Canvas in and out).
``pipeline`` drives a batch through the stages with ``flow``'s scheduler, after the reference solution's own pass;
``slurm`` spreads it over a cluster, ``push`` grades students' pushes, ``authoring`` makes what students receive,
and ``cli`` (``python -m grader``, its verbs in ``commands``) is the entry point. docs/ARCHITECTURE.md maps it.
"""

# Part of every result's identity: a notebook graded by another version is graded again.
GRADER_VERSION = "0.2.0"  # 0.2: vetted builds, bans on the compiled kernel, CPU replay, watchdog
