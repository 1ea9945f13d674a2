/* bcryptprimitives.dll for Debian's wine 8, which lacks it (Windows 10 and later ship it, as
 * does wine from 9 on): its ProcessPrng is where Rust's standard library takes random bytes on
 * Windows. Built by tests/release.rs beside the binary it runs under wine; this one asks
 * RtlGenRandom (advapi32's SystemFunction036), which wine 8 has. */
#include <windows.h>

BOOLEAN WINAPI SystemFunction036(PVOID buffer, ULONG length);

__declspec(dllexport) BOOL WINAPI ProcessPrng(PBYTE data, SIZE_T length) {
    while (length > 0) {
        ULONG chunk = length > 0x10000000 ? 0x10000000 : (ULONG)length;
        if (!SystemFunction036(data, chunk)) {
            return FALSE;
        }
        data += chunk;
        length -= chunk;
    }
    return TRUE;
}
