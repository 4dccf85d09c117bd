"""backends/remote"""
