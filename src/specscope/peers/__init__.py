"""specscope.peers"""
