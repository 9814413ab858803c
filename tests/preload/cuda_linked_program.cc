// A program for the preload's tests that links a library allocating device memory (cuda_user.cc),
// whose constructor runs before libmonet_preload.so's, and runs it once more from main().
extern "C" int fake_cuda_user_run();

int main() { return fake_cuda_user_run(); }
