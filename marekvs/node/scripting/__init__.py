"""Lua scripting: EVAL scripts and function libraries, as Redis 7.0 runs them.

- ``engine.py``: ``Scripting``, the node's scripting engine (``node.scripting``): the
  script cache, running a script (the run context, the checks of ``redis.call``, busy
  scripts and SCRIPT KILL), the function libraries as replicated records.
- ``runtime.py``: one sandboxed Lua 5.1 interpreter (lupa) and the conversions between
  Lua values and reply values.
- ``sandbox.py``: the Lua side of the sandbox (globals, read-only tables, the ``redis``
  table, the error handler, the count hook).
- ``libs.py``: ``bit``, ``struct``, ``cjson``, ``cmsgpack``, ``math.random`` on Python.
- ``functions.py``: library metadata, the library catalog, FUNCTION DUMP's payload.
"""

from marekvs.node.scripting.engine import Scripting

__all__ = ["Scripting"]
