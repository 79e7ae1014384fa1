// The device kind one executable of the contract suite tests (tests/CMakeLists.txt compiles this
// file once per kind with HC_TEST_DEVICE_KIND set: "cpu", "vulkan" or "cuda").
extern const char* const kDeviceKind;
const char* const kDeviceKind = HC_TEST_DEVICE_KIND;
