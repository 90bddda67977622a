"""RESP server: the sans-I/O codec (resp.py) and the asyncio connection loop."""
