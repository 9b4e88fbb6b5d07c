"""The device agent, the msgpack wire format and the collector service (DESIGN.md).

Not built yet.
"""
