print("hang-fixture: not yet")
