"""bench/speed/scale: one million items over a thousand orgs; see __main__.py."""
