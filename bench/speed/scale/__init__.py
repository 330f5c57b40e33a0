"""bench/speed/scale: one million items over a thousand orgs (issue 14 part 3); see __main__.py."""
