#include <gtest/gtest.h>

#include "core/dtype.h"

TEST(DType, Sizes) { EXPECT_EQ(zt::dtype_size(zt::DType::BF16), 2u); }
