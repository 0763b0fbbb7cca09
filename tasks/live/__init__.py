"""Hints to browsers: the one sender to the channel layer (broadcast), one listener per process
(fanout), the live socket (consumers), and who may keep one open (access, origins).
"""
