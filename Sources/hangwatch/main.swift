print("hangwatch: not yet")
