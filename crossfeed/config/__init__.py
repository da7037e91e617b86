"""Configuration: clusters by alias, service settings, and where they come from."""

from crossfeed.config.errors import ConfigError
from crossfeed.config.loader import config_source, load_settings
from crossfeed.config.settings import ClusterConfig, Settings

__all__ = ["ClusterConfig", "ConfigError", "Settings", "config_source", "load_settings"]
