"""specscope.twin"""
