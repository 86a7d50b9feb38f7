// The redaction model: names parsed strictly, KEY=VALUE tokens found the way a user would
// expect (and nothing else touched), and a snapshot redacted part by part.
import HangwatchSnapshot
import Testing
import HangwatchStageTestSupport

@Suite struct RedactionModelTests {
    @Test func namesAreParsedStrictly() throws {
        #expect(try Redaction(names: "all") == .all)
        #expect(try Redaction(names: "none") == [])
        #expect(try Redaction(names: "") == [])
        #expect(try Redaction(names: " arguments , stack-memory ") == [.arguments, .stackMemory])
        #expect(throws: RedactionError(name: "argv")) { try Redaction(names: "arguments,argv") }
        #expect(Redaction.all.description == "arguments,key-values,stderr,stack-memory,kernel-log")
    }

    @Test func keyValueTokensKeepTheirKeys() {
        let text = "TOKEN=abc --password=s3cret a == b x= =y url=https://h/?q=1\n\tAPI_KEY=zzz done"
        #expect(Redaction.redactingKeyValues(in: text)
                == "TOKEN=<redacted> --password=<redacted> a == b x= =y url=<redacted>\n\tAPI_KEY=<redacted> done")
        let longKey = String(repeating: "k", count: 129) + "=v"
        #expect(Redaction.redactingKeyValues(in: longKey) == longKey, "a key longer than 128 bytes is not a key")
        #expect(Redaction.redactingKeyValues(in: "naïve=ü ok") == "naïve=ü ok", "keys are ASCII")
    }

    @Test func argumentsKeepTheProgram() {
        let argv = ["/usr/bin/app", "--token=abc", "plain"]
        #expect(Redaction.arguments.redact(arguments: argv) == ["/usr/bin/app", "<redacted>", "<redacted>"])
        #expect(Redaction.keyValues.redact(arguments: argv) == ["/usr/bin/app", "--token=<redacted>", "plain"])
        #expect(Redaction.stackMemory.redact(arguments: argv) == argv)
        #expect(Redaction.all.redact(arguments: []) == [])
    }
}
