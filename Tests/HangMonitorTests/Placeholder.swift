import Testing

@Test func packageBuilds() {}
