"""The ``crossfeed`` command: admin commands over REST, one ``run`` per service."""
