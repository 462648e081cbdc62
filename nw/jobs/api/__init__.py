"""The API side: the facade's calls (enqueue, reads, cancel, the cost gate, spend
policy, waiting) and the operator's console calls, over the stores.
"""
