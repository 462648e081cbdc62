"""Provider adapters: a provider's queue as a parked job's body, poll, webhook and cancel.

Each module makes, for one application of its provider, the four callables
``register_kind`` takes (``docs/how-to/provider-adapter.md`` is the
protocol): ``nw.providers.fal`` for fal's queue.
"""
