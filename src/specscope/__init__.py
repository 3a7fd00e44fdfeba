"""specscope: why is my speculative-decoding tokens/s what it is, and what changed?"""

__version__ = "0.1.0"
