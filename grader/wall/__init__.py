"""The sandbox wall: bubblewrap around every run of a student's code, the tree of the course it sees, and the
processes that run inside it whatever the stage (the Jupyter kernel, the cell limits, the quick exit).

Which grader modules cross the wall is not this folder's list: ``wall_tree`` finds them by import closure from
the sandbox's entry modules (the run, the builder, the CPU replay).
"""
