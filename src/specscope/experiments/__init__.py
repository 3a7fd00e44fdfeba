"""specscope.experiments"""
