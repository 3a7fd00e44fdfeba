"""specscope.probe"""
