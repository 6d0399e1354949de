"""cosim"""
