"""The GPUs: which device nodes a sandbox gets, who may use a GPU while a judge times on it, whether it is idle,
which processes have work on it, and the runs sharing it watched.
"""
