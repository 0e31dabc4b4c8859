from ._kiln import *
