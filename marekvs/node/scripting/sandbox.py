"""The Lua side of the runtime: the sandbox Redis 7.0 builds around its interpreter, in Lua.

``PRELUDE`` runs once in a fresh lupa ``LuaRuntime`` (a real Lua 5.1) with every standard
library loaded, receives the Python callbacks, and leaves the interpreter as Redis 7.0
leaves its own:

- **Globals.** Scripts see only Redis 7.0's globals (``pairs(_G)`` on redis-server 7.0.15
  lists them; ``os``, ``io``, ``debug``, ``print``, ``require``, ``dofile``, ``getfenv``,
  ``setfenv``, ``newproxy`` ... are absent). Reading a missing global raises "Script
  attempted to access nonexistent global variable 'x'"; every write raises "Attempt to
  modify a readonly table", as Redis's read-only tables do.
- **Read-only tables.** Redis marks the globals and every table reachable from them
  read-only inside its patched Lua. A stock Lua cannot, so scripts get proxies: an empty
  table whose ``__index`` is the real one and whose ``__newindex`` raises. The functions
  that could reach past a proxy (``rawset``, ``rawget``, ``next``, ``pairs``, ``ipairs``,
  ``setmetatable``, ``getmetatable``, ``table.insert/remove/sort/setn``) are wrapped to see
  through it (reads) or refuse (writes) with Redis's texts. The string metatable's
  ``__index`` is the proxy of ``string`` and ``getmetatable('')`` returns a proxy of it.
- **Every chunk runs in the sandbox**: the scripts' own chunks and those they compile with
  ``loadstring`` and ``load`` get the proxy as their environment (``setfenv``); the
  interpreter's real globals stay as lupa needs them (it reads ``debug.traceback`` from
  them) and nothing a script can call returns them. Binary chunks are refused with the
  message Redis's Lua (which parses them as text) gives.
- **No Python object is reachable.** Every Python callback is an upvalue of a Lua
  closure; the runtime's attribute filter refuses attribute access on Python objects
  anyway, and lupa's ``python`` table is not in the sandbox.
- **The error handler** is Redis's ``__redis__err__handler``: it turns an error into a
  table ``{err=..., source=..., line=...}``; frames of this prelude (chunk name
  ``=[marekvs]``) are skipped, so positions point at the user's code as in Redis, where
  these functions are C.
- **The count hook** calls Python every 100,000 instructions (Redis's
  ``luaMaskCountHook``): the busy-script check, SCRIPT KILL and the FUNCTION LOAD
  timeout. Once a script is killed a line hook re-raises the kill error on every line,
  so ``pcall`` cannot swallow it.

The same prelude builds the eval interpreter (``kind == "eval"``: ``KEYS``/``ARGV`` as
globals, ``__redis__err__handler``, ``redis.breakpoint``/``debug``/``replicate_commands``)
and the functions interpreter (``kind == "function"``: while a library loads, its code
sees only ``redis.register_function``, ``redis.log``, the log levels and the version; the
callbacks run with the full API and get ``keys, args`` as arguments).

It returns a table of internal entry points (``api``) that only Python holds.
"""

PRELUDE = r"""
local py, kind, REDIS_VERSION, REDIS_VERSION_NUM = ...

local type, error, tostring, tonumber, select, unpack = type, error, tostring, tonumber, select, unpack
local raw_next, raw_rawget, raw_rawset, rawequal = next, rawget, rawset, rawequal
local raw_setmetatable, raw_getmetatable = setmetatable, getmetatable
local raw_pcall, xpcall, raw_ipairs = pcall, xpcall, ipairs
local raw_loadstring, raw_load, setfenv = loadstring, load, setfenv
local getinfo, sethook = debug.getinfo, debug.sethook
local collectgarbage = collectgarbage
local sbyte, ssub, sfind, sgsub, slower = string.byte, string.sub, string.find, string.gsub, string.lower
local t_insert, t_remove, t_sort = table.insert, table.remove, table.sort

local INTERNAL = "=[marekvs]"
local READONLY = "Attempt to modify a readonly table"

-- -- read-only proxies ----------------------------------------------------------------------
local real_of = {}      -- proxy -> the real table behind it
local meta_of = {}      -- proxy -> what getmetatable shows for it (nil for a library table)
local protected = {}    -- proxies and the real tables behind them: never modified by scripts

local function ro_newindex() error(READONLY, 2) end

local function protect(t, shown_meta)
  local p = {}
  real_of[p] = t
  meta_of[p] = shown_meta
  protected[p] = true
  protected[t] = true
  raw_setmetatable(p, {__index = t, __newindex = ro_newindex, __metatable = false})
  return p
end

local function real(t)
  return real_of[t] or t
end

local function deny(t, fname)
  if protected[t] then error(READONLY, 0) end
end

local function nonexistent(t, k)
  error("Script attempted to access nonexistent global variable '" .. tostring(k) .. "'", 2)
end

-- -- Python functions --------------------------------------------------------------------------
-- They are called as they are (userdata with a C __call, like Redis's C functions: a tail
-- call to one keeps the caller's frame, so error positions stay right) and raise errors as
-- Python exceptions carrying the Lua error value; everything that catches errors unwraps them.
local unwrap = py.unwrap
local py_objs = {}
local function lib(pyf)
  py_objs[pyf] = true
  return pyf
end
local function unwrapped(e)
  if type(e) == 'userdata' then return unwrap(e) end
  return e
end

-- -- the error handler (Redis's __redis__err__handler) ---------------------------------------
local function err_handler(err)
  if type(err) == 'userdata' then err = unwrap(err) end
  local lvl = 2
  local i = getinfo(lvl, 'nSl')
  if i and i.what == 'C' then lvl = lvl + 1; i = getinfo(lvl, 'nSl') end
  while i and (i.source == INTERNAL or i.what == 'tail') do lvl = lvl + 1; i = getinfo(lvl, 'nSl') end
  if type(err) ~= 'table' then err = {err = 'ERR ' .. tostring(err)} end
  if i then
    err['source'] = i.source
    err['line'] = i.currentline
  end
  return err
end

-- -- the count hook: busy scripts, SCRIPT KILL, FUNCTION LOAD timeout -------------------------
local hook_py = py.hook
-- (level 2 of a hook is the function running; ours are left to finish: an error there would
-- escape the script's protected call)
local count_hook
local killed = false  -- the running script is being killed: every thread gets the line hook
local function kill_hook()
  local i = getinfo(2, 'S')
  if i and i.source == INTERNAL then return end
  local msg = hook_py()
  if msg then error({err = msg}) end
  killed = false
  sethook(count_hook, '', 100000)
end
count_hook = function()
  local msg = hook_py()
  if msg then
    killed = true
    sethook(kill_hook, 'l')
    local i = getinfo(2, 'S')
    if i and i.source == INTERNAL then return end
    error({err = msg})
  end
end

-- -- wrapped builtins ------------------------------------------------------------------------
local function w_rawget(t, k) return raw_rawget(real(t), k) end
local function w_rawset(t, k, v)
  deny(t)
  return raw_rawset(t, k, v)
end
local function w_next(t, k) return raw_next(real(t), k) end
local function w_pairs(t)
  if type(t) ~= 'table' then
    error("bad argument #1 to 'pairs' (table expected, got " .. (t == nil and 'no value' or type(t)) .. ")", 2)
  end
  return w_next, t, nil
end
local function ipairs_aux(t, i)
  i = i + 1
  local v = raw_rawget(real(t), i)
  if v ~= nil then return i, v end
end
local function w_ipairs(t)
  if type(t) ~= 'table' then
    error("bad argument #1 to 'ipairs' (table expected, got " .. (t == nil and 'no value' or type(t)) .. ")", 2)
  end
  return ipairs_aux, t, 0
end
local string_meta_shown
local function w_getmetatable(v)
  if type(v) == 'string' then return string_meta_shown end
  if real_of[v] ~= nil then return meta_of[v] end
  return raw_getmetatable(v)
end
local function w_setmetatable(t, m)
  deny(t)
  return raw_setmetatable(t, m)
end

-- the first line of a chunk, as Lua's luaO_chunkid shows it
local function chunkid(name, s)
  if name ~= nil then
    local c = sbyte(name, 1)
    if c == 61 or c == 64 then return ssub(name, 2) end
    s = name
  end
  local z = sfind(s, "[%z\n\r]")
  local line = z and ssub(s, 1, z - 1) or s
  if #line > 43 or (z and sbyte(s, z) ~= 0) then line = ssub(line, 1, 43) .. "..." end
  return '[string "' .. line .. '"]'
end
local BINARY = ":1: unexpected symbol near 'char(27)'"
local P  -- the globals scripts see (set below)
local function sandboxed(f, e)
  if f then setfenv(f, P) end
  return f, e
end
local function w_loadstring(s, name)
  if type(s) == 'string' and sbyte(s, 1) == 27 then
    return nil, chunkid(name, s) .. BINARY
  end
  return sandboxed(raw_loadstring(s, name))
end
local function w_load(fn, name)
  local first = true
  local refused = false
  local function reader()
    local piece = fn()
    if first then
      first = false
      if type(piece) == 'string' and sbyte(piece, 1) == 27 then refused = true; return nil end
    end
    return piece
  end
  local f, e = raw_load(reader, name)
  if refused then return nil, (name and chunkid(name) or "(load)") .. BINARY end
  return sandboxed(f, e)
end

-- redis.pcall's own pcall (luaRedisPcall): a table error with a string 'err' becomes the string
local function pcall_result(ok, ...)
  if ok then return true, ... end
  local e = unwrapped((...))
  if type(e) == 'table' then
    local m = e.err
    local tm = type(m)
    if tm == 'string' or tm == 'number' then return false, m end
    return false, e, nil
  end
  return false, e
end
local function w_pcall(...)
  return pcall_result(raw_pcall(...))
end
local function w_xpcall(f, h)
  return xpcall(f, function(e) return h(unwrapped(e)) end)
end
local raw_resume, raw_create = coroutine.resume, coroutine.create
local function resume_result(ok, ...)
  if ok then return true, ... end
  return false, unwrapped((...))
end
local function resumed(...)
  if killed then sethook(kill_hook, 'l') end
  return resume_result(...)
end
coroutine.resume = function(co, ...) return resumed(raw_resume(co, ...)) end
-- A hook set from Lua belongs to one thread (Redis's C hook covers them all): every
-- coroutine gets the count hook, so a loop inside one is busy and killable too.
coroutine.create = function(f)
  local co = raw_create(f)
  if killed then sethook(co, kill_hook, 'l') else sethook(co, count_hook, '', 100000) end
  return co
end
-- luaL_where(L, 1) as the caller of a C function sees it: the first frame that is not ours
local function user_where()
  local lvl = 3
  local i = getinfo(lvl, 'Sl')
  while i and (i.source == INTERNAL or i.what == 'tail') do lvl = lvl + 1; i = getinfo(lvl, 'Sl') end
  if i and i.currentline > 0 then return i.short_src .. ':' .. i.currentline .. ': ' end
  return ''
end
local function wrap_result(ok, ...)
  if ok then return ... end
  local e = unwrapped((...))
  local te = type(e)
  if te == 'string' or te == 'number' then error(user_where() .. e, 0) end
  error(e, 0)
end
coroutine.wrap = function(f)
  local co = coroutine.create(f)
  return function(...) return wrap_result(resumed(raw_resume(co, ...))) end
end
local function w_type(v)
  local t = type(v)
  if t == 'userdata' and py_objs[v] then return 'function' end
  return t
end

-- table library: writes refuse read-only tables
-- (as Redis's read-only tables: a call that would not write does not fail)
local function w_insert(t, ...) deny(t) return t_insert(t, ...) end
local function w_remove(t, ...)
  if protected[t] and #real(t) > 0 then error(READONLY, 0) end
  return t_remove(real(t), ...)
end
local function w_sort(t, ...)
  if protected[t] and #real(t) > 1 then error(READONLY, 0) end
  return t_sort(real(t), ...)
end
table.insert, table.remove, table.sort = w_insert, w_remove, w_sort

-- -- Redis's C libraries, on Python -----------------------------------------------------------
local null = newproxy()
local function libtable(names, pyfuncs)
  local t = {}
  for i = 1, #names do t[names[i]] = lib(pyfuncs[names[i]]) end
  return t
end
local L = py.libs
local bit = {tobit = lib(L.bit_tobit), bnot = lib(L.bit_bnot), band = lib(L.bit_band),
             bor = lib(L.bit_bor), bxor = lib(L.bit_bxor), lshift = lib(L.bit_lshift),
             rshift = lib(L.bit_rshift), arshift = lib(L.bit_arshift), rol = lib(L.bit_rol),
             ror = lib(L.bit_ror), bswap = lib(L.bit_bswap), tohex = lib(L.bit_tohex)}
local struct = {pack = lib(L.struct_pack), unpack = lib(L.struct_unpack), size = lib(L.struct_size)}
local cjson = {encode = lib(L.cjson_encode), decode = lib(L.cjson_decode),
               encode_sparse_array = lib(L.cjson_encode_sparse_array),
               encode_max_depth = lib(L.cjson_encode_max_depth),
               decode_max_depth = lib(L.cjson_decode_max_depth),
               encode_number_precision = lib(L.cjson_encode_number_precision),
               encode_keep_buffer = lib(L.cjson_encode_keep_buffer),
               encode_invalid_numbers = lib(L.cjson_encode_invalid_numbers),
               decode_invalid_numbers = lib(L.cjson_decode_invalid_numbers),
               new = nil}
cjson.new = function() return cjson end
cjson.null = null
cjson._NAME = "cjson"
cjson._VERSION = "2.1.0"
local cmsgpack = {pack = lib(L.cmsgpack_pack), unpack = lib(L.cmsgpack_unpack),
                  unpack_one = lib(L.cmsgpack_unpack_one), unpack_limit = lib(L.cmsgpack_unpack_limit)}
cmsgpack._NAME = "cmsgpack"
cmsgpack._VERSION = "lua-cmsgpack 0.4.0"
cmsgpack._COPYRIGHT = "Copyright (C) 2012, Salvatore Sanfilippo"
cmsgpack._DESCRIPTION = "MessagePack C implementation for Lua"

math.random = lib(L.math_random)
math.randomseed = lib(L.math_randomseed)

-- -- the redis table ---------------------------------------------------------------------------
local function rerr(msg) error({err = 'ERR ' .. msg}) end

-- luaPushErrorBuff: "-CODE msg" keeps its code, anything else gets ERR; CR/LF trimmed
local function error_text(buf)
  local code, msg
  if sbyte(buf, 1) == 45 then
    local sp = sfind(buf, ' ', 1, true)
    if sp then code, msg = ssub(buf, 2, sp - 1), ssub(buf, sp + 1)
    else code, msg = 'ERR', ssub(buf, 2) end
  else
    code, msg = 'ERR', buf
  end
  msg = sgsub(msg, '^[\r\n]+', '')
  msg = sgsub(msg, '[\r\n]+$', '')
  return code .. ' ' .. msg
end

local function api_redis(full)
  local r = {}
  if full then
    r.call = lib(py.call)
    r.pcall = lib(py.pcall)
  end
  r.log = lib(py.log)
  r.LOG_DEBUG, r.LOG_VERBOSE, r.LOG_NOTICE, r.LOG_WARNING = 0, 1, 2, 3
  r.REDIS_VERSION_NUM = REDIS_VERSION_NUM
  r.REDIS_VERSION = REDIS_VERSION
  if not full then return r end
  r.setresp = lib(py.setresp)
  r.sha1hex = lib(py.sha1hex)
  r.error_reply = function(...)
    local s = (...)
    if select('#', ...) ~= 1 or type(s) ~= 'string' then return {err = 'ERR wrong number or type of arguments'} end
    if sbyte(s, 1) ~= 45 then s = '-' .. s end
    return {err = error_text(s)}
  end
  r.status_reply = function(...)
    local s = (...)
    if select('#', ...) ~= 1 or type(s) ~= 'string' then return {err = 'ERR wrong number or type of arguments'} end
    return {ok = s}
  end
  r.set_repl = lib(py.set_repl)
  r.REPL_NONE, r.REPL_AOF, r.REPL_SLAVE, r.REPL_REPLICA, r.REPL_ALL = 0, 1, 2, 2, 3
  r.acl_check_cmd = lib(py.acl_check)
  if kind == 'eval' then
    r.breakpoint = function() return false end
    r.debug = function() end
    r.replicate_commands = function() return true end
  end
  return r
end

-- -- the globals ------------------------------------------------------------------------------
local string_p = protect(string)
local G = {}
local P_meta_real = {__index = nonexistent}
raw_setmetatable(G, P_meta_real)
P = {}
local P_meta = {__index = G, __newindex = ro_newindex, __metatable = false}
raw_setmetatable(P, P_meta)
real_of[P] = G
meta_of[P] = protect(P_meta_real)
protected[P] = true
protected[G] = true

local redis_p = protect(api_redis(true))
G.redis = redis_p
G.string = string_p
G.table = protect(table)
G.math = protect(math)
G.coroutine = protect(coroutine)
G.cjson = protect(cjson)
G.bit = protect(bit)
G.struct = protect(struct)
G.cmsgpack = protect(cmsgpack)
G._G = P
G._VERSION = _VERSION
G.assert = assert
G.collectgarbage = collectgarbage
G.error = error
G.gcinfo = gcinfo
G.getmetatable = w_getmetatable
G.setmetatable = w_setmetatable
G.ipairs = w_ipairs
G.pairs = w_pairs
G.next = w_next
G.rawget = w_rawget
G.rawset = w_rawset
G.rawequal = rawequal
G.load = w_load
G.loadstring = w_loadstring
G.pcall = w_pcall
G.xpcall = w_xpcall
G.select = select
G.tonumber = tonumber
G.tostring = tostring
G.type = w_type
G.unpack = unpack
if kind == 'eval' then G.__redis__err__handler = err_handler end

local string_meta = raw_getmetatable('')
string_meta.__index = string_p
string_meta_shown = protect(string_meta)

-- functions: while a library loads, its code sees only this
local LIB_REDIS = api_redis(false)
local loading = nil   -- the library being loaded: {order = {names...}, by = {name -> entry}}
local FLAG_BITS = {['no-writes'] = 1, ['allow-oom'] = 2, ['allow-stale'] = 4, ['no-cluster'] = 8,
                   ['allow-cross-slot-keys'] = 16}
local function valid_name(s)
  return #s > 0 and not sfind(s, '[^%w_]')
end
LIB_REDIS.register_function = function(...)
  if loading == nil then rerr('redis.register_function can only be called on FUNCTION LOAD command') end
  local argc = select('#', ...)
  if argc < 1 or argc > 2 then rerr('wrong number of arguments to redis.register_function') end
  local name, cb, desc, flags = nil, nil, nil, 0
  if argc == 1 then
    local t = (...)
    if type(t) ~= 'table' then
      rerr('calling redis.register_function with a single argument is'
        .. ' only applicable to Lua table (representing named arguments).')
    end
    for k, v in raw_next, real(t) do
      local tk = type(k)
      if tk ~= 'string' and tk ~= 'number' then
        rerr('named argument key given to redis.register_function is not a string')
      end
      local key = slower(tostring(k))
      local tv = type(v)
      if key == 'function_name' then
        if tv ~= 'string' and tv ~= 'number' then
          rerr('function_name argument given to redis.register_function must be a string')
        end
        name = tostring(v)
      elseif key == 'description' then
        if tv ~= 'string' and tv ~= 'number' then
          rerr('description argument given to redis.register_function must be a string')
        end
        desc = tostring(v)
      elseif key == 'callback' then
        if tv ~= 'function' then rerr('callback argument given to redis.register_function must be a function') end
        cb = v
      elseif key == 'flags' then
        if tv ~= 'table' then
          rerr('flags argument to redis.register_function must be a table representing function flags')
        end
        local j = 1
        while true do
          local f = v[j]
          if f == nil then break end
          local tf = type(f)
          if tf ~= 'string' and tf ~= 'number' then rerr('unknown flag given') end
          local bitv = FLAG_BITS[slower(tostring(f))]
          if bitv == nil then rerr('unknown flag given') end
          if flags % (bitv * 2) < bitv then flags = flags + bitv end
          j = j + 1
        end
      else
        rerr('unknown argument given to redis.register_function')
      end
    end
    if not name then rerr('redis.register_function must get a function name argument') end
    if not cb then rerr('redis.register_function must get a callback argument') end
  else
    local n, f = ...
    local tn = type(n)
    if tn ~= 'string' and tn ~= 'number' then rerr('first argument to redis.register_function must be a string') end
    if type(f) ~= 'function' then rerr('second argument to redis.register_function must be a function') end
    name, cb = tostring(n), f
  end
  if not valid_name(name) then
    rerr('Library names can only contain letters, numbers, or underscores(_) and must be at least one character long')
  end
  if loading.by[name] then rerr('Function already exists in the library') end
  loading.by[name] = {cb, desc, flags}
  loading.order[#loading.order + 1] = name
end
raw_setmetatable(LIB_REDIS, {__index = nonexistent})
local LIB_ENV = {redis = protect(LIB_REDIS)}
raw_setmetatable(LIB_ENV, {__index = nonexistent})
protected[LIB_ENV] = true

-- -- what Python calls -------------------------------------------------------------------------
local api = {}

function api.compile(code, name)
  return sandboxed(raw_loadstring(code, name))
end

local function first(ok, v) return ok, v end

-- KEYS and ARGV (or a function's keys and args) from the call's arguments: filled one by
-- one from empty tables, as Redis's luaCreateArray does; few arguments are read with select
-- (no third table to collect)
local function split(nkeys, ...)
  local n = select('#', ...)
  local keys, argv = {}, {}
  if n <= 16 then
    for i = 1, nkeys do keys[i] = (select(i, ...)) end
    for i = nkeys + 1, n do argv[i - nkeys] = (select(i, ...)) end
  else
    local all = {...}
    for i = 1, nkeys do keys[i] = all[i] end
    for i = nkeys + 1, n do argv[i - nkeys] = all[i] end
  end
  return keys, argv
end

function api.run_eval(f, nkeys, ...)
  local keys, argv = split(nkeys, ...)
  raw_rawset(G, 'KEYS', keys)
  raw_rawset(G, 'ARGV', argv)
  return first(xpcall(f, err_handler))
end

function api.run_function(cb, nkeys, ...)
  local keys, args = split(nkeys, ...)
  return first(xpcall(function() return cb(keys, args) end, err_handler))
end

function api.load_library(code)
  local f, e = sandboxed(raw_loadstring(code, '@user_function'))
  if not f then return false, 'compile', e end
  loading = {order = {}, by = {}}
  P_meta.__index = LIB_ENV
  local ok, err = raw_pcall(f)
  P_meta.__index = G
  local lib = loading
  loading = nil
  if not ok then return false, 'run', err end
  local out = {}
  for i = 1, #lib.order do
    local name = lib.order[i]
    local e = lib.by[name]
    out[i] = {name, e[1], e[2], e[3]}
  end
  return true, out
end

-- luaReplyToRedisReply's reading of a table: its kind, and what it carries
function api.classify(t)
  local e = raw_rawget(t, 'err')
  if type(e) == 'string' then return 'err', t end
  local ok = raw_rawget(t, 'ok')
  if type(ok) == 'string' then return 'ok', ok end
  local d = raw_rawget(t, 'double')
  if type(d) == 'number' then return 'double', d end
  local b = raw_rawget(t, 'big_number')
  if type(b) == 'string' then return 'big_number', b end
  local v = raw_rawget(t, 'verbatim_string')
  if type(v) == 'table' then
    local fmt = raw_rawget(v, 'format')
    if type(fmt) == 'string' then
      local s = raw_rawget(v, 'string')
      if type(s) == 'string' then return 'verbatim', s, fmt end
    end
  end
  local m = raw_rawget(t, 'map')
  if type(m) == 'table' then return 'map', m end
  local s = raw_rawget(t, 'set')
  if type(s) == 'table' then return 'set', s end
  return 'array'
end

-- up to 1000 array elements from index i on, stopping before the first nil
function api.slice(t, i)
  local j = i
  local lim = i + 1000
  while j < lim and raw_rawget(t, j) ~= nil do j = j + 1 end
  return unpack(t, i, j - 1)
end

-- the pairs of a table in next order, flattened (k1, v1, k2, v2, ...), 500 at a time
function api.pairs(t, k)
  local out = {}
  local n = 0
  while n < 1000 do
    local v
    k, v = raw_next(t, k)
    if k == nil then break end
    out[n + 1] = k
    out[n + 2] = v
    n = n + 2
  end
  return n, unpack(out, 1, n)
end

-- luaExtractErrorInformation
function api.errinfo(e)
  if type(e) ~= 'table' then return false, e end
  return true, e.err, e.source, e.line, e.ignore_error_stats_update
end

function api.new_array(...)
  local all = {...}
  local t = {}
  for i = 1, select('#', ...) do t[i] = all[i] end
  return t
end

function api.new_map(...)
  local all = {...}
  local t = {}
  for i = 1, select('#', ...), 2 do t[all[i]] = all[i + 1] end
  return t
end

function api.new_set(...)
  local all = {...}
  local t = {}
  for i = 1, select('#', ...) do t[all[i]] = true end
  return t
end

-- luaL_where(L, 1) of a Python function that is raising an error: the position of the Lua
-- code that called it (levels: 1 this function, 2 the Python function's __call, 3 its caller)
function api.where()
  local i = getinfo(3, 'Sl')
  if i and i.currentline > 0 then return i.short_src .. ':' .. i.currentline .. ': ' end
  return ''
end

function api.new_err(msg, ignore)
  local e = {err = msg}
  if ignore then e.ignore_error_stats_update = true end
  return e
end

function api.is_null(v) return rawequal(v, null) end
api.null = null
api.rawget = raw_rawget
api.err_handler = err_handler

function api.gc() collectgarbage('collect') end
function api.gc_step() collectgarbage('step', 50) end
function api.reset_hook()
  killed = false
  sethook(count_hook, '', 100000)
end

api.reset_hook()
return api
"""
