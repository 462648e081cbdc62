"""The pure core: the job record, its outcome and retry policy, ETAs, limits and checks.

Nothing here touches a store, a thread or a clock it was not handed.
"""
