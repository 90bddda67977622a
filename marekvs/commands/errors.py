"""Every error reply text, exactly as Redis 7.0 words it. Nothing else spells errors.

Handlers raise ``CommandError(text)``; keyspace operations raise typed statuses
(``keyspace/status.py``), which ``status_text`` maps to their texts here. User bytes echoed
in a text go through ``echo`` (Redis prints them with ``%s``: cut at a NUL).
"""

from __future__ import annotations

from marekvs.core.sds import c_str
from marekvs.keyspace import status as st
from marekvs.keyspace.hll import InvalidHll


class CommandError(Exception):
    """Raised by a handler; the dispatcher replies with ``-<message>``."""

    def __init__(self, message: str):
        super().__init__(message)
        self.message = message


WRONGTYPE = "WRONGTYPE Operation against a key holding the wrong kind of value"
NOT_INTEGER = "ERR value is not an integer or out of range"
NOT_FLOAT = "ERR value is not a valid float"
OVERFLOW = "ERR increment or decrement would overflow"
NAN_OR_INF = "ERR increment would produce NaN or Infinity"
SYNTAX = "ERR syntax error"
NO_SUCH_KEY = "ERR no such key"
NOAUTH = "NOAUTH Authentication required."
MULTI_NESTED = "ERR MULTI calls can not be nested"
EXEC_WITHOUT_MULTI = "ERR EXEC without MULTI"
DISCARD_WITHOUT_MULTI = "ERR DISCARD without MULTI"
WATCH_IN_MULTI = "ERR WATCH inside MULTI is not allowed"
NOT_IN_MULTI = "ERR Command not allowed inside a transaction"
EXECABORT = "EXECABORT Transaction discarded because of previous errors."
WRONGPASS = "WRONGPASS invalid username-password pair or user is disabled."
AUTH_NOT_CONFIGURED = ("ERR AUTH <password> called without any password configured for the "
                       "default user. Are you sure your configuration is correct?")
DB_OUT_OF_RANGE = "ERR DB index is out of range"
NOPROTO = "NOPROTO unsupported protocol version"
STRING_TOO_LONG = "ERR string exceeds maximum allowed size (proto-max-bulk-len)"
OFFSET_OUT_OF_RANGE = "ERR offset is out of range"
INVALID_CURSOR = "ERR invalid cursor"
NX_XX_GT_LT = "ERR NX and XX, GT or LT options at the same time are not compatible"
GT_LT = "ERR GT and LT options at the same time are not compatible"
TIMEOUT_NEGATIVE = "ERR timeout is negative"
TIMEOUT_NOT_INT = "ERR timeout is not an integer or out of range"
NO_SHUTDOWN = "ERR No shutdown in progress."
INVALID_COMMAND = "ERR Invalid command specified"
INVALID_COMMAND_ARITY = "ERR Invalid number of arguments specified for command"
NO_KEY_ARGUMENTS = "ERR The command has no key arguments"


def wrong_arity(fullname: str) -> str:
    return f"ERR wrong number of arguments for '{fullname}' command"


def echo(b: bytes) -> str:
    """User bytes echoed in an error text (``%s`` in Redis): cut at the first NUL, raw
    bytes kept (the dispatcher encodes the text back with surrogateescape)."""
    return c_str(b).decode("utf-8", "surrogateescape")


def unknown_command(args: list[bytes]) -> str:
    """Redis's text, echoing the client's bytes as C strings (the name cut at 128 bytes,
    the args until 128 bytes of them are shown)."""
    tail = b""
    for a in args[1:]:
        if len(tail) >= 128:
            break
        tail += b"'%s' " % c_str(a)[: 128 - len(tail)]
    return (b"ERR unknown command '%s', with args beginning with: %s"
            % (c_str(args[0])[:128], tail)).decode("utf-8", "surrogateescape")


def unknown_subcommand(container: str, sub: bytes) -> str:
    return (b"ERR unknown subcommand '%s'. Try %s HELP."
            % (c_str(sub)[:128], container.upper().encode())).decode("utf-8", "surrogateescape")


def subcommand_syntax(container: str, sub: bytes) -> str:
    """Redis's ``addReplySubcommandSyntaxError``: a subcommand whose own argument count check
    failed."""
    return (b"ERR unknown subcommand or wrong number of arguments for '%s'. Try %s HELP."
            % (c_str(sub)[:128], container.upper().encode())).decode("utf-8", "surrogateescape")


def config_set_failed(name: str, why: str) -> str:
    return f"ERR CONFIG SET failed (possibly related to argument '{name}') - {why}"


def invalid_expire(fullname: str) -> str:
    return f"ERR invalid expire time in '{fullname}' command"


def unsupported_option(opt: bytes) -> str:
    return "ERR Unsupported option %s" % echo(opt)


# -- connection (connection.py) ---------------------------------------------------------------
PROTOVER_NOT_INTEGER = "ERR Protocol version is not an integer or out of range"
HELLO_NOAUTH = ("NOAUTH HELLO must be called with the client already authenticated, otherwise the HELLO "
                "AUTH <user> <pass> option can be used to authenticate the client and select the RESP "
                "protocol version at the same time")
CLIENT_NAME_CHARS = "ERR Client names cannot contain spaces, newlines or special characters."
INVALID_CLIENT_ID = "ERR Invalid client ID"
NO_SUCH_CLIENT = "ERR No such client"
CLIENT_ID_POSITIVE = "ERR client-id should be greater than 0"
INTERNAL = "ERR internal error"
UNBLOCKED = "UNBLOCKED client unblocked via CLIENT UNBLOCK"
TRACKING_PREFIX_BCAST = "ERR PREFIX option requires BCAST mode to be enabled"
TRACKING_NO_REDIRECT = "ERR The client ID you want redirect to does not exist"
TRACKING_ONE_REDIRECT = "ERR A client can only redirect to a single other client"
TRACKING_OPTIN_OPTOUT = "ERR You can't specify both OPTIN mode and OPTOUT mode"
TRACKING_OPT_BCAST = "ERR OPTIN and OPTOUT are not compatible with BCAST"
TRACKING_SWITCH_BCAST = ("ERR You can't switch BCAST mode on/off before disabling tracking for this client, "
                         "and then re-enabling it with a different mode.")
TRACKING_SWITCH_OPT = ("ERR You can't switch OPTIN/OPTOUT mode before disabling tracking for this client, "
                       "and then re-enabling it with a different mode.")
CACHING_MODE = ("ERR CLIENT CACHING can be called only when the client is in tracking mode with OPTIN or "
                "OPTOUT mode enabled")
CACHING_YES = "ERR CLIENT CACHING YES is only valid when tracking is enabled in OPTIN mode."
CACHING_NO = "ERR CLIENT CACHING NO is only valid when tracking is enabled in OPTOUT mode."


def tracking_prefix_overlap(a: bytes, b: bytes) -> str:
    return (f"ERR Prefix '{echo(a)}' overlaps with another provided prefix '{echo(b)}'. "
            "Prefixes for a single client must not overlap.")


def pubsub_context(fullname: str) -> str:
    return (f"ERR Can't execute '{fullname}': only (P|S)SUBSCRIBE / (P|S)UNSUBSCRIBE / PING / QUIT / RESET "
            "are allowed in this context")


UNBLOCK_REASON = "ERR CLIENT UNBLOCK reason should be TIMEOUT or ERROR"
PAUSE_MODE = "ERR CLIENT PAUSE mode must be WRITE or ALL"
SLOWLOG_COUNT = "ERR count should be greater than or equal to -1"


def hello_option(opt: bytes) -> str:
    return "ERR Syntax error in HELLO option '%s'" % echo(opt)


def unknown_client_type(t: bytes) -> str:
    return "ERR Unknown client type '%s'" % echo(t)


def setinfo_chars(attr: bytes) -> str:
    return "ERR %s cannot contain spaces, newlines or special characters." % echo(attr).lower()


def unrecognized_option(opt: bytes) -> str:
    return "ERR Unrecognized option '%s'" % echo(opt)


def internal_error(fullname: str) -> str:
    return f"ERR internal error executing '{fullname}'"


# -- CONFIG SET (admin.py, and the tails tunables.py gives its failures) -------------------
def config_set_unknown(name: str) -> str:
    return f"ERR Unknown option or number of arguments for CONFIG SET - '{name}'"


CFG_DUPLICATE = "duplicate parameter"
CFG_BOOL = "argument must be 'yes' or 'no'"
CFG_NOT_INTEGER = "argument couldn't be parsed into an integer"
CFG_NOT_MEMORY = "argument must be a memory value"
CFG_TLS = "Unable to update TLS configuration. Check server logs."
MONITOR_DENY_BLOCKING = "ERR MONITOR isn't allowed for DENY BLOCKING client"
REPLICA_KEYSPACE = "ERR Replica can't interact with the keyspace"
CFG_SAVE = "Invalid save parameters"
CFG_BUFFER_LIMIT_ARGS = "Wrong number of arguments in buffer limit configuration."
CFG_BUFFER_LIMIT_CLASS = "Invalid client class specified in buffer limit configuration."
CFG_BUFFER_LIMIT_VALUES = "Error in hard, soft or soft_seconds setting in buffer limit configuration."
CFG_EVENT_CLASS = "Invalid event class character. Use 'Ag$lshzxeKEtmdn'."


def cfg_one_of(choices: tuple[str, ...]) -> str:
    return "argument(s) must be one of the following: " + ", ".join(choices)


def cfg_between(lo: int, hi: int) -> str:
    return f"argument must be between {lo} and {hi} inclusive"


def cfg_immutable(kind: str) -> str:
    return f"can't set {kind} config"


# -- strings and keyspace (strings.py, keys.py) -------------------------------------------
DECREMENT_OVERFLOW = "ERR decrement would overflow"
SAME_OBJECT = "ERR source and destination objects are the same"
LCS_NOT_STRINGS = "ERR The specified keys must contain string values"
LCS_LEN_AND_IDX = "ERR If you want both the length and indexes, please just use IDX."
LCS_TOO_MUCH_MEMORY = ("ERR Insufficient memory, transient memory for LCS exceeds "
                       "proto-max-bulk-len")
LFU_NOT_SELECTED = ("ERR An LFU maxmemory policy is not selected, access frequency not "
                    "tracked. Please note that when switching between policies at runtime "
                    "LRU and LFU data will take some time to adjust.")
LFU_SELECTED = ("ERR An LFU maxmemory policy is selected, idle time not tracked. Please "
                "note that when switching between policies at runtime LRU and LFU data "
                "will take some time to adjust.")


def value_out_of_range(lo: int, hi: int) -> str:
    return f"ERR value is out of range, value must between {lo} and {hi}"


# -- hashes, sets and per-member TTL (hashes.py, sets.py, members.py) ----------------------
HASH_NOT_INTEGER = "ERR hash value is not an integer"
HASH_NOT_FLOAT = "ERR hash value is not a float"
NAN_OR_INFINITY = "ERR value is NaN or Infinity"
OUT_OF_RANGE = "ERR value is out of range"
OUT_OF_RANGE_POSITIVE = "ERR value is out of range, must be positive"
NUMKEYS_POSITIVE = "ERR numkeys should be greater than 0"
NUMKEYS_TOO_MANY = "ERR Number of keys can't be greater than number of args"
LIMIT_NEGATIVE = "ERR LIMIT can't be negative"
# Redis 7.4's field TTL commands (HEXPIRE, HTTL, HPERSIST ...)
EXPIRE_NEGATIVE = "ERR invalid expire time, must be >= 0"
FIELDS_MISSING = "ERR Mandatory argument FIELDS is missing or not at the right position"
NUMFIELDS_POSITIVE = "ERR Parameter `numFields` should be greater than 0"
NUMFIELDS_NOT_POSITIVE_INT = "ERR Number of fields must be a positive integer"
NUMFIELDS_MISMATCH = "ERR The `numfields` parameter must match the number of arguments"
# KeyDB's per-member TTL (EXPIREMEMBER ..., TTL key member)
TYPE_UNSUPPORTED = "ERR object type is unsupported"
INVALID_NUMBER_OF_ARGUMENTS = "ERR Invalid number of arguments"
INVALID_UNIT = "ERR Invalid unit arg"
MEMBER_TTL_ARGUMENTS = "ERR Invalid arguments"
# marekvs-specific: Redis builds such a reply until memory runs out (a count of 2^62)
TOO_MANY_REPLIES = "ERR count exceeds the number of elements marekvs replies with at once (2147483647)"
# -- lists (lists.py) ------------------------------------------------------------------------
TIMEOUT_NOT_FLOAT = "ERR timeout is not a float or out of range"
NOT_POSITIVE = OUT_OF_RANGE_POSITIVE
INDEX_OUT_OF_RANGE = "ERR index out of range"
LPOS_RANK_ZERO = ("ERR RANK can't be zero: use 1 to start from the first match, 2 from the second ... "
                  "or use negative to start from the end of the list")
LPOS_COUNT_NEGATIVE = "ERR COUNT can't be negative"
LPOS_MAXLEN_NEGATIVE = "ERR MAXLEN can't be negative"
COUNT_POSITIVE = "ERR count should be greater than 0"
# -- sorted sets and geo (zsets.py, geo.py) ------------------------------------------------
# (shares OUT_OF_RANGE, OUT_OF_RANGE_POSITIVE, NUMKEYS_POSITIVE, COUNT_POSITIVE, LIMIT_NEGATIVE,
# TIMEOUT_NOT_FLOAT with the families above)
ZSET_MIN_MAX_NOT_FLOAT = "ERR min or max is not a float"
ZSET_NOT_STRING_RANGE = "ERR min or max not valid string range item"
ZADD_XX_NX = "ERR XX and NX options at the same time are not compatible"
ZADD_GT_LT_NX = "ERR GT, LT, and/or NX options at the same time are not compatible"
ZADD_INCR_PAIR = "ERR INCR option supports a single increment-element pair"
ZSET_NAN_SCORE = "ERR resulting score is not a number (NaN)"
ZRANGE_LIMIT_RANK = "ERR syntax error, LIMIT is only supported in combination with either BYSCORE or BYLEX"
ZRANGE_WITHSCORES_LEX = "ERR syntax error, WITHSCORES not supported in combination with BYLEX"
ZSET_WEIGHT_NOT_FLOAT = "ERR weight value is not a float"
TIMEOUT_OUT_OF_RANGE = "ERR timeout is out of range"
GEO_RADIUS_NEGATIVE = "ERR radius cannot be negative"
GEO_HEIGHT_WIDTH_NEGATIVE = "ERR height or width cannot be negative"
GEO_UNIT = "ERR unsupported unit provided. please use M, KM, FT, MI"
GEO_COUNT_POSITIVE = "ERR COUNT must be > 0"
GEO_ANY_WITHOUT_COUNT = "ERR the ANY argument requires COUNT argument"
GEO_MEMBER_MISSING = "ERR could not decode requested zset member"
GEO_NEED_RADIUS = "ERR need numeric radius"
GEO_NEED_WIDTH = "ERR need numeric width"
GEO_NEED_HEIGHT = "ERR need numeric height"


def zset_at_least_one_key(name: str) -> str:
    return f"ERR at least 1 input key is needed for '{name}' command"


def geo_invalid_pair(lon: float, lat: float) -> str:
    return "ERR invalid longitude,latitude pair %f,%f" % (lon, lat)


def geo_store_with_options(searchstore: bool) -> str:
    what = "GEOSEARCHSTORE" if searchstore else "STORE option in GEORADIUS"
    return f"ERR {what} is not compatible with WITHDIST, WITHHASH and WITHCOORD options"


def geo_from_required(name: bytes) -> str:
    return "ERR exactly one of FROMMEMBER or FROMLONLAT can be specified for %s" % echo(name)


def geo_by_required(name: bytes) -> str:
    return "ERR exactly one of BYRADIUS and BYBOX can be specified for %s" % echo(name)


# -- DUMP/RESTORE, SORT, MEMORY, SWAPDB/MOVE (dump.py, sort.py, memory.py) ----------------
BUSYKEY = "BUSYKEY Target key name already exists."
DUMP_PAYLOAD = "ERR DUMP payload version or checksum are wrong"
BAD_DATA_FORMAT = "ERR Bad data format"
INVALID_TTL = "ERR Invalid TTL value, must be >= 0"
INVALID_IDLETIME = "ERR Invalid IDLETIME value, must be >= 0"
INVALID_FREQ = "ERR Invalid FREQ value, must be >= 0 and <= 255"
SORT_NOT_DOUBLE = "ERR One or more scores can't be converted into double"


def misconf(reason: str) -> str:
    """Writes refused while the storage cannot write: Redis's MISCONF for an AOF write error
    (the write-ahead log is this node's AOF: INFO persistence's ``aof_last_write_status``)."""
    return f"MISCONF Errors writing to the AOF file: {reason}"


INVALID_FIRST_DB = "ERR invalid first DB index"
INVALID_SECOND_DB = "ERR invalid second DB index"


def dump_unsupported(type_name: str) -> str:
    """marekvs-specific: DUMP of a type whose RDB encoding is not written yet."""
    return f"ERR DUMP of a {type_name} is not supported yet"


# -- streams and consumer groups (streams.py) ---------------------------------------------
INVALID_STREAM_ID = "ERR Invalid stream ID specified as stream command argument"
INVALID_START_ID = "ERR invalid start ID for the interval"
INVALID_END_ID = "ERR invalid end ID for the interval"
MAXLEN_AND_MINID = "ERR syntax error, MAXLEN and MINID options at the same time are not compatible"
MAXLEN_NEGATIVE = "ERR The MAXLEN argument must be >= 0."
XTRIM_LIMIT_NEGATIVE = "ERR The LIMIT argument must be >= 0."
LIMIT_WITHOUT_STRATEGY = "ERR syntax error, LIMIT cannot be used without specifying a trimming strategy"
XTRIM_WITHOUT_STRATEGY = "ERR syntax error, XTRIM must be called with a trimming strategy"
LIMIT_WITHOUT_APPROX = "ERR syntax error, LIMIT cannot be used without the special ~ option"
XADD_ID_ZERO = "ERR The ID specified in XADD must be greater than 0-0"
XADD_ID_TOO_SMALL = "ERR The ID specified in XADD is equal or smaller than the target stream top item"
STREAM_EXHAUSTED = "ERR The stream has exhausted the last possible ID, unable to add more items"
ELEMENTS_TOO_LARGE = "ERR Elements are too large to be stored"
ENTRIES_ADDED_NEGATIVE = "ERR entries_added must be positive"
XSETID_BELOW_MAXDEL = "ERR The ID specified in XSETID is smaller than the provided max_deleted_entry_id"
XSETID_TOO_SMALL = "ERR The ID specified in XSETID is smaller than the target stream top item"
XSETID_ADDED_TOO_SMALL = "ERR The entries_added specified in XSETID is smaller than the target stream length"
XREAD_UNBALANCED = ("ERR Unbalanced XREAD list of streams: for each stream key an ID or '$' must be "
                    "specified.")
XREAD_GROUP_OPTION = "ERR The GROUP option is only supported by XREADGROUP. You called XREAD instead."
XREAD_NOACK_OPTION = "ERR The NOACK option is only supported by XREADGROUP. You called XREAD instead."
XREADGROUP_NO_GROUP = "ERR Missing GROUP option for XREADGROUP"
XREAD_BLOCK_IN_SCRIPT = "ERR %s command is not allowed with BLOCK option from scripts"  # the name as given
XREADGROUP_DOLLAR = ("ERR The $ ID is meaningless in the context of XREADGROUP: you want to read the "
                     "history of this consumer by specifying a proper ID, or use the > ID to get new "
                     "messages. The $ ID would just return an empty result set.")
XREAD_GT_OPTION = ("ERR The > ID can be specified only when calling XREADGROUP using the GROUP <group> "
                   "<consumer> option.")
NOGROUP_BLOCKED_GONE = "NOGROUP the consumer group this client was blocked on no longer exists"
BUSYGROUP = "BUSYGROUP Consumer Group name already exists"
XGROUP_NO_KEY = ("ERR The XGROUP subcommand requires the key to exist. Note that for CREATE you may want "
                 "to use the MKSTREAM option to create an empty stream automatically.")
ENTRIESREAD_NEGATIVE = "ERR value for ENTRIESREAD must be positive or -1"
XCLAIM_MIN_IDLE = "ERR Invalid min-idle-time argument for XCLAIM"
XCLAIM_IDLE = "ERR Invalid IDLE option argument for XCLAIM"
XCLAIM_TIME = "ERR Invalid TIME option argument for XCLAIM"
XCLAIM_RETRYCOUNT = "ERR Invalid RETRYCOUNT option argument for XCLAIM"
XAUTOCLAIM_MIN_IDLE = "ERR Invalid min-idle-time argument for XAUTOCLAIM"
XAUTOCLAIM_COUNT = "ERR COUNT must be > 0"


def nogroup_read(key: bytes, group: bytes) -> str:
    return "NOGROUP No such key '%s' or consumer group '%s' in XREADGROUP with GROUP option" % (
        echo(key), echo(group))


def nogroup_key(key: bytes, group: bytes) -> str:
    return "NOGROUP No such key '%s' or consumer group '%s'" % (echo(key), echo(group))


def nogroup_name(key: bytes, group: bytes) -> str:
    return "NOGROUP No such consumer group '%s' for key name '%s'" % (echo(group), echo(key))


def xclaim_option(opt: bytes) -> str:
    return "ERR Unrecognized XCLAIM option '%s'" % echo(opt)


# -- typed statuses of the keyspace (keyspace/status.py) -----------------------------------
_STATUS_TEXT: dict[type[st.KeyspaceError], str] = {
    st.WrongType: WRONGTYPE,
    st.NotInteger: NOT_INTEGER,
    st.NotFloat: NOT_FLOAT,
    st.Overflow: OVERFLOW,
    st.NanOrInf: NAN_OR_INF,
    st.NoSuchKey: NO_SUCH_KEY,
    st.TooLong: STRING_TOO_LONG,
}


def status_text(e: st.KeyspaceError) -> str:
    """The Redis error text of a keyspace status."""
    return _STATUS_TEXT[type(e)]


# -- COMMAND GETKEYS / GETKEYSANDFLAGS (introspection.py) ----------------------------------
INVALID_ARGUMENTS = "ERR Invalid arguments specified for command"


# -- ACL (acl.py, aclrules.py, node/acl.py) --------------------------------------------------
# refused before a command runs (processCommand)
NOPERM_KEY = "NOPERM this user has no permissions to access one of the keys used as arguments"
NOPERM_CHANNEL = "NOPERM this user has no permissions to access one of the channels used as arguments"
# refused at EXEC: the rules changed after the command was queued (execCommand)
_EXEC_CHANGED = ("NOPERM ACLs rules changed between the moment the transaction was accumulated and the EXEC "
                 "call. This command is no longer allowed for the following reason: ")
NOPERM_EXEC_CMD = _EXEC_CHANGED + "no permission to execute the command or subcommand"
NOPERM_EXEC_KEY = _EXEC_CHANGED + "no permission to touch the specified keys"
NOPERM_EXEC_CHANNEL = _EXEC_CHANGED + "no permission to access one of the channels used as arguments"
# refused inside a script (scriptVerifyACL; the script layer adds where it happened)
SCRIPT_NOPERM_CMD = "ERR The user executing the script can't run this command or subcommand"
SCRIPT_NOPERM_KEY = ("ERR The user executing the script can't access at least one of the keys mentioned "
                     "in the command arguments")
SCRIPT_NOPERM_CHANNEL = "ERR The user executing the script can't publish to the channel mentioned in the command"
ACL_USERNAME_SPACES = "ERR Usernames can't contain spaces or null characters"
ACL_DEFAULT_UNDELETABLE = "ERR The 'default' user cannot be removed"
SORT_BY_DENIED = "ERR BY option of SORT denied due to insufficient ACL permissions."
SORT_GET_DENIED = "ERR GET option of SORT denied due to insufficient ACL permissions."
ACL_GENPASS_BITS = ("ERR ACL GENPASS argument must be the number of bits for the output password, a positive "
                    "number up to 4096")
ACL_NO_FILE = ("ERR This Redis instance is not configured to use an ACL file. You may want to specify users "
               "via the ACL SETUSER command and then issue a CONFIG REWRITE (assuming you have a Redis "
               "configuration file set) in order to store users in the Redis configuration.")
ACL_SAVE_FAILED = ("ERR There was an error trying to save the ACLs. Please check the server logs for more "
                   "information")
DENIED_PROTECTED = (
    "DENIED Redis is running in protected mode because protected mode is enabled and no password is set for "
    "the default user. In this mode connections are only accepted from the loopback interface. If you want to "
    "connect from external computers to Redis you may adopt one of the following solutions: 1) Just disable "
    "protected mode sending the command 'CONFIG SET protected-mode no' from the loopback interface by "
    "connecting to Redis from the same host the server is running, however MAKE SURE Redis is not publicly "
    "accessible from internet if you do so. Use CONFIG REWRITE to make this change permanent. 2) Alternatively "
    "you can just disable the protected mode by editing the Redis configuration file, and setting the "
    "protected mode option to 'no', and then restarting the server. 3) If you started the server manually "
    "just for testing, restart it with the '--protected-mode no' option. 4) Setup a an authentication password "
    "for the default user. NOTE: You only need to do one of the above things in order for the server to start "
    "accepting connections from the outside.")


def noperm_command(fullname: str) -> str:
    return f"NOPERM this user has no permissions to run the '{fullname}' command"


def acl_setuser_modifier(op: bytes, why: str) -> str:
    return "ERR Error in ACL SETUSER modifier '%s': %s" % (echo(op), why)


def acl_unmatched_parenthesis(op: bytes) -> str:
    return "ERR Unmatched parenthesis in acl selector starting at '%s'." % echo(op)


def acl_unknown_category(name: bytes) -> str:
    return "ERR Unknown category '%s'" % echo(name[:128])


def acl_user_not_found(name: bytes) -> str:
    return "ERR User '%s' not found" % echo(name)


def acl_command_not_found(name: bytes) -> str:
    return "ERR Command '%s' not found" % echo(name)


def acl_open_failed(path: str, why: str) -> str:
    """(an ACL LOAD error: ``acl_load_failed`` makes the reply)"""
    return f"Error loading ACLs, opening file '{path}': {why}"


def acl_load_failed(errors: str) -> str:
    return "ERR " + errors


def no_such_user(name: bytes) -> str:
    return "ERR No such user '%s'" % echo(name)


# ACL DRYRUN's answers when the user may not run the command (bulk strings, not errors)
def dryrun_command(fullname: str) -> str:
    return f"This user has no permissions to run the '{fullname}' command"


def dryrun_key(key: bytes) -> str:
    return "This user has no permissions to access the '%s' key" % echo(key)


def dryrun_channel(channel: bytes) -> str:
    return "This user has no permissions to access the '%s' channel" % echo(channel)


# -- HyperLogLog and bitmaps (hll.py, bitmaps.py) -------------------------------------------
INVALID_HLL = "WRONGTYPE Key is not a valid HyperLogLog string value."
BIT_OFFSET = "ERR bit offset is not an integer or out of range"
BIT_VALUE = "ERR bit is not an integer or out of range"
BITPOS_BIT = "ERR The bit argument must be 1 or 0."
BITOP_NOT_ONE_KEY = "ERR BITOP NOT must be called with a single source key."
BITFIELD_TYPE = ("ERR Invalid bitfield type. Use something like i16 u8. Note that u64 is not "
                 "supported but i64 is.")
BITFIELD_OVERFLOW = "ERR Invalid OVERFLOW type specified"
BITFIELD_RO_GET = "ERR BITFIELD_RO only supports the GET subcommand"
_STATUS_TEXT[InvalidHll] = INVALID_HLL
# -- scripting: EVAL, SCRIPT, FUNCTION, FCALL (scripting.py, node/scripting/) ---------------
NOSCRIPT = "NOSCRIPT No matching script. Please use EVAL."
# a shard worker (shards > 1) reached a key another worker owns where the router did not see it
# (a safety net: the engine's range check; docs/shards.md)
OTHER_SHARD_WORKER = ("ERR the key is on another shard worker: with shards > 1 a script reaches only the keys "
                      "of the worker of its declared keys")
# a script reached a key it did not declare on a worker another unit held past the wait (server/mesh.py;
# its next runs lock every worker up front: docs/shards.md §3)
OTHER_SHARD_WORKER_BUSY = ("ERR script touched a key outside its declared KEYS on another shard worker while "
                           "a transaction held it")
NUMKEYS_NEGATIVE = "ERR Number of keys can't be negative"
BAD_NUMKEYS = "ERR Bad number of keys provided"
SCRIPT_RO_WRITE_FLAG = "ERR Can not execute a script with write flag using *_ro command."
NOTBUSY = "NOTBUSY No scripts in execution right now."
UNKILLABLE = ("UNKILLABLE Sorry the script already executed write commands against the dataset. You can "
              "either wait the script termination or kill the server in a hard way using the SHUTDOWN "
              "NOSAVE command.")
BUSY_EVAL = "BUSY Redis is busy running a script. You can only call SCRIPT KILL or SHUTDOWN NOSAVE."
BUSY_FUNCTION = "BUSY Redis is busy running a script. You can only call FUNCTION KILL or SHUTDOWN NOSAVE."
FUNCTION_NOT_FOUND = "ERR Function not found"
LIBRARY_NOT_FOUND = "ERR Library not found"
SCRIPT_FLUSH_MODE = "ERR SCRIPT FLUSH only support SYNC|ASYNC option"
FUNCTION_FLUSH_MODE = "ERR FUNCTION FLUSH only supports SYNC|ASYNC option"
RESTORE_POLICY = "ERR Wrong restore policy given, value should be either FLUSH, APPEND or REPLACE."
FUNCTION_CODE_MISSING = "ERR Function code is missing"
LIBRARY_NAME_MISSING = "ERR library name argument was not given"


# the scripting engine (node/scripting/engine.py): raised in a script by the redis.* API
# (the engine hands them to Lua as bytes), refused calls, failed runs
SCRIPT_KILLED = "ERR Script killed by user with SCRIPT KILL..."
FUNCTION_LOAD_TIMEOUT = "ERR FUNCTION LOAD timeout"
LUA_CALL_OUTSIDE_SCRIPT = "ERR redis.call/pcall can only be called inside a script invocation"
LUA_NO_ARGUMENTS = "ERR Please specify at least one argument for this redis lib call"
LUA_ARGUMENT_TYPE = "ERR Lua redis lib command arguments must be strings or integers"
LUA_UNKNOWN_COMMAND = "ERR Unknown Redis command called from script"
LUA_COMMAND_ARITY = "ERR Wrong number of args calling Redis command from script"
LUA_NOSCRIPT_COMMAND = "ERR This Redis command is not allowed from script"
LUA_WRITE_IN_READ_ONLY = "ERR Write commands are not allowed from read-only scripts."
LUA_LOG_ARGUMENTS = "ERR redis.log() requires two arguments or more."
LUA_LOG_LEVEL_NOT_NUMBER = "ERR First argument must be a number (log level)."
LUA_LOG_LEVEL = "ERR Invalid debug level."
LUA_SETRESP_ARGUMENTS = "ERR redis.setresp() requires one argument."
LUA_SETRESP_VERSION = "ERR RESP version must be 2 or 3."
LUA_SHA1HEX_ARGUMENTS = "ERR wrong number of arguments"
LUA_SET_REPL_ARGUMENTS = "ERR redis.set_repl() requires two arguments."
LUA_SET_REPL_FLAGS = "ERR Invalid replication flags. Use REPL_AOF, REPL_REPLICA, REPL_ALL or REPL_NONE."
LUA_ACL_CHECK_COMMAND = "ERR Invalid command passed to redis.acl_check_cmd()"
# (an error table without 'err': Redis 7.0 crashes on it; marekvs says so instead)
SCRIPT_ERROR_WITHOUT_MESSAGE = "ERR the script raised an error without a message"


def script_out_of_memory(name: bytes) -> str:
    return "ERR Error running script %s, not enough memory " % name.decode("latin-1")


def script_failed(name: bytes, text: str) -> str:
    """A script that failed with a Lua error that is not an error table."""
    return "ERR Error running script %s, %.100s " % (name.decode("latin-1"), text)


def script_error_place(name: bytes, source: str, line: str) -> str:
    """What follows an error table's text: where the script raised it."""
    return " script: %s, on %s:%s." % (name.decode("latin-1"), source, line)


def script_compile_failed(msg: str) -> str:
    return "ERR Error compiling script (new function): " + msg


def err(text: str) -> str:
    """An ERR reply of a text without a code: the library texts below, a shebang's or a
    FUNCTION RESTORE payload's (node/scripting/functions.py), a Lua error's."""
    return "ERR " + text


# why a library cannot be loaded (FUNCTION LOAD and RESTORE answer ERR and the text; a
# library record from a peer that cannot be loaded logs it)
LIBRARY_NAME_CHARS = ("Library names can only contain letters, numbers, or underscores(_) and must be at least "
                      "one character long")
LIBRARY_OUT_OF_MEMORY = "Error registering functions: ERR not enough memory"
NO_FUNCTIONS_REGISTERED = "No functions registered"


def library_engine_not_found(engine: bytes) -> str:
    return "Engine '%s' not found" % engine.decode("utf-8", "surrogateescape")


def library_register_failed(text: str) -> str:
    """``text`` is the Lua error with its code (ERR unless the error table had one)."""
    return "Error registering functions: %s" % text


LIBRARY_UNKNOWN_ERROR = "ERR unknown error"  # (the code and text library_register_failed takes)


def function_compile_failed(text: str) -> str:
    return "Error compiling function: %s" % text


def library_exists(name: bytes) -> str:
    return "ERR Library '%s' already exists" % name.decode("utf-8", "surrogateescape")


def library_exists_unquoted(name: bytes) -> str:
    """FUNCTION RESTORE APPEND's wording (functionsLibCtxFunctionsMerge: no quotes)."""
    return "ERR Library %s already exists" % name.decode("utf-8", "surrogateescape")


def function_exists(name: bytes) -> str:
    return "ERR Function %s already exists" % name.decode("utf-8", "surrogateescape")


# a library's or an EVAL script's shebang line, a FUNCTION RESTORE payload
# (node/scripting/functions.py; the engine answers them with ``err``)
LIBRARY_METADATA_MISSING = "Missing library metadata"
LIBRARY_METADATA_INVALID = "Invalid library metadata"
LIBRARY_NAME_TWICE = "Invalid metadata value, name argument was given multiple times"
LIBRARY_NAME_NOT_GIVEN = "Library name was not given"
SHEBANG_INVALID = "Invalid script shebang"
SHEBANG_ENGINE_INVALID = "Invalid engine in script shebang"
PAYLOAD_NOT_FUNCTION = "given type is not a function"
PAYLOAD_UNREADABLE = "failed loading the given functions payload"
LUA_STACK_LIMIT = "ERR reached lua stack limit"


def library_metadata_value(part: bytes) -> str:
    return "Invalid metadata value given: %s" % echo(part)


def shebang_engine(engine: bytes) -> str:
    return "Unexpected engine in script shebang: %s" % echo(engine)


def shebang_flag(flag: bytes) -> str:
    return "Unexpected flag in script shebang: %s" % echo(flag)


def shebang_option(option: bytes) -> str:
    return "Unknown lua shebang option: %s" % echo(option)


def function_load_option(opt: bytes) -> str:
    return "ERR Unknown option given: %s" % echo(opt)


def function_list_argument(arg: bytes) -> str:
    return "ERR Unknown argument %s" % echo(arg)
