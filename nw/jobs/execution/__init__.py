"""The execution side: the worker, the in-process runtime, a body's attempt, the reaper,
recovery, wake-ups and the journal of finishes a store refused.
"""
