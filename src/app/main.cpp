#include <cstdio>
int main() { std::fprintf(stderr, "hotcold: not built yet\n"); return 1; }
