"""The box's resources: usable CPUs, heap trimming, free disk, temperature."""
