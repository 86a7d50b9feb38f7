// Whether a copied stack window runs into its thread's own descriptor, which no capture may copy
// (hwd_stack_window_bytes in Sources/CHangwatchDump/include/hw_registers.h): on x86-64 glibc's
// TCB (tcbhead_t, at the thread pointer) begins with a pointer to itself and holds another at
// +16 (`tcb`, `self`), followed by the stack protector's canary and the pointer guard. A window
// holding that pattern at the address it was copied from holds the descriptor.

/// The offset in `stack` (copied from `sp`) of the calling pattern of an x86-64 TCB, or nil.
/// Always nil on other architectures, whose descriptor has no such pattern.
public func ownThreadDescriptorOffset(in stack: [UInt8], copiedFrom sp: UInt64) -> Int? {
    #if arch(x86_64)
    func word(_ at: Int) -> UInt64 {
        stack.withUnsafeBytes { $0.loadUnaligned(fromByteOffset: at, as: UInt64.self) }
    }
    let misalignment = Int(sp % 8)
    var offset = misalignment == 0 ? 0 : 8 - misalignment
    while offset + 24 <= stack.count {
        let address = sp &+ UInt64(offset)
        if word(offset) == address && word(offset + 16) == address { return offset }
        offset += 8
    }
    #endif
    return nil
}
