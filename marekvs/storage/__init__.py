"""Storage: the engine over rocksdict (column families, the one apply path, group
commit, the replication log, durability) and the expiry sweeper."""
