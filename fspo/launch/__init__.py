"""Checks and settings made before Ray starts: the config, the models' availability, the hub, attention, paths."""
