print("capture-fixture: not yet")
