"""crossfeed: exactly-once Kafka replication across data centers.

This package holds what every service shares (wire contract, configuration,
pure decision logic, thin Kafka wrappers) and the small client library that
applications import (``crossfeed.client``).
"""

__version__ = "0.1.0"
