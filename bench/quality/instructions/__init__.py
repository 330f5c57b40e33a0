"""Instructed retrieval: the labelled (instruction -> filters) set and its scorer."""
