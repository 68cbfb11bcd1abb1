"""Adapters that give an agent framework's runs an episodic memory.

One module per framework, each importing its framework only when imported itself (with the
``pip install`` hint when it is missing), each built on the public API of
``deepcrew_episodic`` alone: recall before the model sees the task, record after the run.
"""
