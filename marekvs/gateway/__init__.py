"""Gateways: other wire protocols over the same data.

Each gateway is a client of the node like the RESP listener is: it runs commands through
``node.dispatch`` (so ACL users, the commit barrier and replication apply unchanged) and
reads the keyspace where a command would cost a copy. ``kafka/`` serves the Kafka
protocol on topics kept as streams in Korvet's layout.
"""
