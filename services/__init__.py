"""crossfeed services: one package per service, each run by `crossfeed <service> run`."""
