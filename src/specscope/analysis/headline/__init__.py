"""A run's headline figures: the measured run, tps = commit length / step time, its intervals and precision."""
