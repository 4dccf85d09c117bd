"""stages/impl"""
