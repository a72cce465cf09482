#include "harness/cli/cli.hpp"

int main(int argc, char** argv) { return sweetspot::cli_main(argc, argv); }
