print("keyauth")
