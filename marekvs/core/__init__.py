"""The frozen format and the merge lattices of marekvs. Pure code: no I/O.

Nothing in this package may import asyncio, rocksdict, grpc or pyspark. Everything
here is specified byte for byte in ``crates_ref/`` and the data model spec.
"""
