print("remote-fixture: not yet")
